"""The time a GPU bench may spend on its cells: no cell starts that the time left would not
see through. Shared by bench/gpu_throughput.py and bench/gpu_memory_plan.py, so that
bench/gpu_check.sh can give each a share of a short GPU window and know it is kept."""
from __future__ import annotations

import time


class Budget:
    """The seconds left for cells, and a guess of the next one's: the longest of its kind
    (a model size, say) so far, else twice the longest of any (a larger model, built on
    first use)."""

    def __init__(self, seconds: float | None, clock=time.monotonic):
        self._clock = clock
        self._deadline = clock() + seconds if seconds is not None else None
        self._seconds_by_kind: dict[str, float] = {}

    def left(self) -> float:
        return self._deadline - self._clock() if self._deadline is not None else float("inf")

    def guess(self, kind: str) -> float:
        if kind in self._seconds_by_kind:
            return self._seconds_by_kind[kind]
        return 2 * max(self._seconds_by_kind.values(), default=0.0)

    def allows(self, kind: str, *, extra_seconds: float = 0.0) -> bool:
        """`extra_seconds`: what the cell needs first (building its model, say)."""
        return self.guess(kind) + extra_seconds <= self.left()

    def spent(self, kind: str, seconds: float) -> None:
        self._seconds_by_kind[kind] = max(seconds, self._seconds_by_kind.get(kind, 0.0))

    def refusal(self, kind: str, *, extra_seconds: float = 0.0) -> str:
        """Why a cell did not start, for its row."""
        return (f"not started: {self.left():.0f} s of the budget left, a cell takes "
                f"about {self.guess(kind) + extra_seconds:.0f} s")
