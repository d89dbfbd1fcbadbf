import math

import pytest

from trainer.schedule import FINAL_LEARNING_RATE_RATIO, learning_rate_at, total_optimizer_steps

PEAK = 1e-3


def rates(total_steps: int, warmup_steps: int) -> list[float]:
    return [learning_rate_at(step, peak_learning_rate=PEAK, warmup_steps=warmup_steps,
                             total_steps=total_steps) for step in range(total_steps)]


def test_warmup_rises_linearly_to_the_peak():
    schedule = rates(total_steps=100, warmup_steps=10)
    assert schedule[:10] == pytest.approx([PEAK * (step + 1) / 10 for step in range(10)])
    assert schedule[9] == pytest.approx(PEAK)


def test_cosine_falls_to_a_tenth_of_the_peak_on_the_last_step():
    schedule = rates(total_steps=100, warmup_steps=10)
    after_warmup = schedule[10:]
    assert after_warmup[0] == pytest.approx(PEAK)
    assert all(later <= earlier for earlier, later in zip(after_warmup, after_warmup[1:]))
    assert schedule[-1] == pytest.approx(PEAK * FINAL_LEARNING_RATE_RATIO)


def test_no_warmup_starts_at_the_peak_and_halfway_is_the_midpoint():
    schedule = rates(total_steps=101, warmup_steps=0)
    assert schedule[0] == pytest.approx(PEAK)
    midpoint = PEAK * (1 + FINAL_LEARNING_RATE_RATIO) / 2
    assert schedule[50] == pytest.approx(midpoint)


def test_single_step_run_uses_the_peak():
    assert rates(total_steps=1, warmup_steps=0) == [pytest.approx(PEAK)]


def test_steps_past_the_end_stay_at_the_floor():
    rate = learning_rate_at(500, peak_learning_rate=PEAK, warmup_steps=0, total_steps=100)
    assert rate == pytest.approx(PEAK * FINAL_LEARNING_RATE_RATIO)


def test_total_steps_from_max_steps_or_epochs():
    common = {"example_count": 1000, "micro_batch_size": 4, "grad_accum": 2, "world_size": 2}
    assert total_optimizer_steps(max_steps=7, epochs=None, **common) == 7
    assert total_optimizer_steps(max_steps=None, epochs=1, **common) == math.ceil(1000 / 16)
    assert total_optimizer_steps(max_steps=None, epochs=0.001, **common) == 1
    with pytest.raises(ValueError):
        total_optimizer_steps(max_steps=None, epochs=None, **common)


def test_linear_and_constant_schedules():
    linear = [learning_rate_at(step, peak_learning_rate=PEAK, warmup_steps=0, total_steps=11,
                               schedule="linear") for step in range(11)]
    assert linear[0] == pytest.approx(PEAK)
    assert linear[5] == pytest.approx(PEAK * (FINAL_LEARNING_RATE_RATIO + 1) / 2)
    assert linear[-1] == pytest.approx(PEAK * FINAL_LEARNING_RATE_RATIO)
    constant = [learning_rate_at(step, peak_learning_rate=PEAK, warmup_steps=2, total_steps=10,
                                 schedule="constant") for step in range(10)]
    assert constant[:2] == [pytest.approx(PEAK / 2), pytest.approx(PEAK)]
    assert constant[2:] == [PEAK] * 8
