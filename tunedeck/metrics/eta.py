"""How long a running job has left, from its step rows: one rule for the job page's progress
line and `tunedeck watch`/`status` (pure: no I/O, no heavy import)."""
from __future__ import annotations

import statistics
from typing import Any

from tunedeck.metrics.figures import STEP_SECONDS

# The rate: the mean time a step over about this many recent steps, wall clock (evals and
# checkpoints included, as they will recur). Not the median: with bimodal step times
# (accumulation, an eval every few steps) the median is the fast mode, and the ETA too short.
ETA_RECENT_STEPS = 50


def eta_seconds(train: list[dict[str, Any]], max_steps: int | None) -> float | None:
    """Seconds left at the recent mean step time: the wall clock between the rows of the
    last `ETA_RECENT_STEPS` steps, or, with a single row, the mean of its step times."""
    if not train or not max_steps:
        return None
    last = train[-1]
    recent = [row for row in train if row["step"] >= last["step"] - ETA_RECENT_STEPS]
    first = recent[0]
    if first is not last and last.get("time") is not None and first.get("time") is not None \
            and last["step"] > first["step"]:
        seconds_a_step = (last["time"] - first["time"]) / (last["step"] - first["step"])
    else:
        times = [row[STEP_SECONDS.field] for row in recent
                 if row.get(STEP_SECONDS.field) is not None]
        if not times:
            return None
        seconds_a_step = statistics.fmean(times)
    return seconds_a_step * max(0, max_steps - last["step"])


def format_duration(seconds: float) -> str:
    """"7s", "2m 05s", "3h 04m"."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"
