"""Where a rank's start-up goes: seconds spent in each stage since the process started.

Time to first point is mostly start-up (imports, tokenizer, model, data, backend), and a
launch that got slower must say which stage did. Rank 0 prints the stages as one
"start-up seconds:" line in its log; bench/first_point.py reads it from there. A printed
line, not a metrics event, so the job's events and the worker's ingest are unchanged.
"""
from __future__ import annotations

import time


def process_start_time() -> float:
    """Unix time this process started (the kernel's record; 10 ms resolution)."""
    import psutil

    return psutil.Process().create_time()


class StartupClock:
    def __init__(self, started: float):
        self._last = started
        self._stages: list[tuple[str, float]] = []

    @classmethod
    def since_process_start(cls) -> "StartupClock":
        return cls(process_start_time())

    def mark(self, stage: str) -> None:
        """`stage` ended now: it took the time since the previous mark."""
        now = time.time()
        self._stages.append((stage, max(0.0, now - self._last)))
        self._last = now

    def stages(self) -> list[tuple[str, float]]:
        return list(self._stages)

    def as_text(self) -> str:
        return "start-up seconds: " + ", ".join(f"{stage} {seconds:.2f}"
                                                 for stage, seconds in self._stages)
