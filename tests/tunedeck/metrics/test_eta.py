"""The ETA the job page and `tunedeck watch`/`status` share: the recent mean step time
times the steps left."""
import pytest

from tunedeck.metrics.eta import eta_seconds, format_duration


def _steps(count, step_seconds=0.5):
    return [{"step": step, "time": 1000.0 + step * step_seconds, "step_seconds": step_seconds}
            for step in range(1, count + 1)]


def test_bimodal_step_times_give_the_mean_not_the_fast_mode():
    # Every fourth step is slow (an eval, a gradient sync): 3 x 0.2 s + 2.6 s = 0.8 s a step.
    train, clock = [], 0.0
    for step in range(1, 201):
        seconds = 2.6 if step % 4 == 0 else 0.2
        clock += seconds
        train.append({"step": step, "time": clock, "step_seconds": seconds})
    assert eta_seconds(train, 400) == pytest.approx(200 * 0.8, rel=0.05)
    # Without wall-clock times (a single row), the mean of its step times.
    assert eta_seconds([{"step": 4, "step_seconds": 2.0}], 10) == 12.0


def test_only_the_recent_steps_set_the_rate():
    # 100 slow steps (1 s), then 60 fast ones (0.1 s): the last 50 steps' rate counts.
    train = [{"step": step, "time": float(step)} for step in range(1, 101)]
    train += [{"step": 100 + step, "time": 100 + step * 0.1} for step in range(1, 61)]
    assert eta_seconds(train, 260) == pytest.approx(100 * 0.1)


def test_eta_needs_step_times_and_a_total():
    assert eta_seconds([], 100) is None
    assert eta_seconds(_steps(3), None) is None
    assert eta_seconds([{"step": 1, "step_seconds": None}], 10) is None
    assert eta_seconds(_steps(10, step_seconds=2.0), 20) == 20.0
    assert eta_seconds(_steps(30), 20) == 0.0  # past the total: nothing left, never negative


def test_durations_read_as_seconds_minutes_or_hours():
    assert [format_duration(seconds) for seconds in (7, 125, 3600 * 3 + 4 * 60 + 59)] == \
        ["7s", "2m 05s", "3h 04m"]
