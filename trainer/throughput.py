"""The training summary's throughput: tokens and seconds of the steps after the first (the
first pays one-off costs), as rank 0 prints it (`training summary: ...`, which the benches
parse)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Throughput:
    """Tokens and seconds of the steps after the first (the first pays one-off costs)."""

    first_step: int = 1
    tokens: float = 0.0
    seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)
    # Of `seconds`, the time spent handing the step's figures to the telemetry: what
    # running with `--metrics off` saves (bench/telemetry_overhead.py).
    telemetry_seconds: float = 0.0

    def add(self, *, step: int, tokens: float, seconds: float,
            telemetry_seconds: float = 0.0) -> None:
        if step > self.first_step:
            self.tokens += tokens
            self.seconds += seconds
            self.step_seconds.append(seconds)
            self.telemetry_seconds += telemetry_seconds

    def as_text(self) -> str:
        tokens_per_second = self.tokens / self.seconds if self.seconds else 0.0
        median_step_seconds = statistics.median(self.step_seconds) if self.step_seconds else 0.0
        return (f"tokens={int(self.tokens)} seconds={self.seconds:.4f} "
                f"tokens_per_second={tokens_per_second:.2f} "
                f"median_step_seconds={median_step_seconds:.6f} "
                f"telemetry_seconds={self.telemetry_seconds:.6f}")
