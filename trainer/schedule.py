"""The training length and the learning-rate schedule, as tiny pure functions.

Both backends set the rate from `learning_rate_at` on every optimizer step, so a ZeRO-2 run
and an FSDP run of the same spec follow the same curve.
"""
from __future__ import annotations

import math

FINAL_LEARNING_RATE_RATIO = 0.1  # the cosine ends at 10% of the peak, not at zero


def total_optimizer_steps(*, max_steps: int | None, epochs: float | None, example_count: int,
                          micro_batch_size: int, grad_accum: int, world_size: int) -> int:
    """`max_steps` as given, or enough steps to show every example `epochs` times."""
    if max_steps is not None:
        return max_steps
    if epochs is None:
        raise ValueError("set max_steps or epochs")
    examples_per_step = micro_batch_size * grad_accum * world_size
    return max(1, math.ceil(epochs * example_count / examples_per_step))


def learning_rate_at(step: int, *, peak_learning_rate: float, warmup_steps: int,
                     total_steps: int, schedule: str = "cosine") -> float:
    """Rate for optimizer step `step` (0-based): linear warmup, then `schedule` — cosine or
    linear decay to 10% of the peak, or constant at the peak."""
    if step < warmup_steps:
        return peak_learning_rate * (step + 1) / warmup_steps
    if schedule == "constant":
        return peak_learning_rate
    decay_steps = max(1, total_steps - warmup_steps - 1)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    remaining = 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress
    final_learning_rate = peak_learning_rate * FINAL_LEARNING_RATE_RATIO
    return final_learning_rate + (peak_learning_rate - final_learning_rate) * remaining
