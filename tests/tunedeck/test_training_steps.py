"""The step arithmetic the trainer runs and the preview shows (tunedeck/training_steps.py):
the learning-rate curve, the batch layout and step count, and which steps evaluate or save."""
import math

import pytest

from tunedeck.spec.job_spec import JobSpec
from tunedeck.training_steps import (FINAL_LEARNING_RATE_RATIO, BatchLayout,
                                     LearningRateSchedule, checkpoint_count, checkpoint_due,
                                     eval_count, eval_due)

PEAK = 1e-3


def rates(total_steps: int, warmup_steps: int, decay: str = "cosine") -> list[float]:
    """The rate of every step of a run, steps counted from 1 as the loop counts them."""
    schedule = LearningRateSchedule(peak=PEAK, warmup_steps=warmup_steps, decay=decay,
                                    total_steps=total_steps)
    return [schedule.rate(step) for step in range(1, total_steps + 1)]


def test_warmup_rises_linearly_to_the_peak():
    schedule = rates(total_steps=100, warmup_steps=10)
    assert schedule[:10] == pytest.approx([PEAK * step / 10 for step in range(1, 11)])
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
    schedule = LearningRateSchedule(peak=PEAK, warmup_steps=0, decay="cosine", total_steps=100)
    assert schedule.rate(501) == pytest.approx(PEAK * FINAL_LEARNING_RATE_RATIO)


def test_linear_and_constant_schedules():
    linear = rates(total_steps=11, warmup_steps=0, decay="linear")
    assert linear[0] == pytest.approx(PEAK)
    assert linear[5] == pytest.approx(PEAK * (FINAL_LEARNING_RATE_RATIO + 1) / 2)
    assert linear[-1] == pytest.approx(PEAK * FINAL_LEARNING_RATE_RATIO)
    constant = rates(total_steps=10, warmup_steps=2, decay="constant")
    assert constant[:2] == [pytest.approx(PEAK / 2), pytest.approx(PEAK)]
    assert constant[2:] == [PEAK] * 8


def test_a_run_of_epochs_knows_its_warmup_but_not_its_decay_until_the_data_is_counted():
    schedule = LearningRateSchedule.of(JobSpec(epochs=1, warmup_steps=4, learning_rate=PEAK))
    assert schedule.total_steps is None and schedule.landmark_steps() == []
    assert schedule.rate(2) == pytest.approx(PEAK / 2)
    with pytest.raises(ValueError, match="once the data is tokenized"):
        schedule.rate(5)
    assert LearningRateSchedule.of(JobSpec(epochs=1, lr_schedule="constant")).rate(9) == 2e-4


def test_the_landmarks_are_the_curves_turns_and_what_as_json_shows_is_the_rate_there():
    schedule = LearningRateSchedule.of(JobSpec(max_steps=30, warmup_steps=4,
                                               learning_rate=PEAK))
    assert schedule.landmark_steps() == [1, 4, 5, 17, 30]
    shown = schedule.as_json()
    assert shown["at_steps"] == [{"step": step, "learning_rate": schedule.rate(step)}
                                 for step in (1, 4, 5, 17, 30)]
    assert (shown["peak"], shown["final"]) == (PEAK, pytest.approx(PEAK / 10))
    assert LearningRateSchedule.of(JobSpec(max_steps=1)).landmark_steps() == [1]


def test_total_steps_from_max_steps_or_epochs():
    layout = BatchLayout(micro_batch_size=4, grad_accum=2, world_size=2, seq_len=64,
                         rows_per_unit=1, unit="examples")
    assert layout.total_steps(max_steps=7, epochs=None, unit_count=1000) == 7
    assert layout.total_steps(max_steps=None, epochs=1, unit_count=1000) == math.ceil(1000 / 16)
    assert layout.total_steps(max_steps=None, epochs=0.001, unit_count=1000) == 1
    with pytest.raises(ValueError):
        layout.total_steps(max_steps=None, epochs=None, unit_count=1000)


def test_the_layout_counts_examples_packed_rows_or_pairs_per_step():
    spec = JobSpec(max_steps=1, micro_batch_size=4, grad_accum=2, num_gpus=2, num_nodes=2,
                   seq_len=128)
    layout = BatchLayout.of(spec)
    assert (layout.units_per_step, layout.unit, layout.tokens_per_step_at_most) == (
        32, "examples", 32 * 128)
    assert layout.as_text() == ("4 examples x 2 micro-batches x 4 ranks = 32 examples a step "
                                "(at most 4,096 tokens at seq_len 128)")
    assert BatchLayout.of(spec, world_size=1).units_per_step == 8  # a launch's own ranks
    packed = BatchLayout.of(spec.model_copy(update={"packing": True}))
    assert packed.unit == "packed rows"
    pairs = BatchLayout.of(JobSpec(max_steps=1, objective="dpo", seq_len=128))
    assert (pairs.unit, pairs.units_per_step, pairs.tokens_per_step_at_most) == (
        "pairs", 4, 4 * 2 * 128)


@pytest.mark.parametrize("total_steps", [1, 5, 22, 30])
@pytest.mark.parametrize("every_steps", [0, 1, 5, 7, 40])
def test_the_counts_are_the_steps_that_are_due(total_steps, every_steps):
    steps = range(1, total_steps + 1)
    assert eval_count(total_steps=total_steps, every_steps=every_steps) == sum(
        eval_due(step, total_steps=total_steps, every_steps=every_steps) for step in steps)
    assert checkpoint_count(total_steps=total_steps, every_steps=every_steps) == sum(
        checkpoint_due(step, every_steps=every_steps) for step in steps)
    assert eval_due(total_steps, total_steps=total_steps, every_steps=every_steps)
