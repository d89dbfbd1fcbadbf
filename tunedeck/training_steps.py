"""What an optimizer step is and which steps a run takes, as small pure functions: the batch
layout, the step count, the learning rate at each step, and the steps that evaluate or save
a checkpoint.

The trainer runs these (trainer/train.py, trainer/evaluation.py, trainer/checkpoint.py),
DeepSpeed's config takes its batch size from the layout (tunedeck/backends/zero2.py), and the
preview shows their answers (tunedeck/launch_config.py's `trainer_settings`): what the form
shows is what the ranks do. Both backends set the rate from `LearningRateSchedule.rate` on
every optimizer step, so a ZeRO-2 run and an FSDP run of the same spec follow the same curve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunedeck.spec.job_spec import JobSpec

FINAL_LEARNING_RATE_RATIO = 0.1  # the decay ends at 10% of the peak, not at zero


@dataclass(frozen=True)
class BatchLayout:
    """One optimizer step's batch: `micro_batch_size` units a rank a forward, `grad_accum`
    forwards a step, on `world_size` ranks. A unit is a row (an example, or a packed row of
    several), under objective dpo a preference pair, two rows (chosen, rejected), under
    objective grpo a sampled completion (with its prompt, one row)."""

    micro_batch_size: int
    grad_accum: int
    world_size: int
    seq_len: int
    rows_per_unit: int
    unit: str  # "examples", "packed rows", "pairs" or "completions": what a micro-batch counts
    # Units one record of the data makes in an epoch: objective grpo samples a prompt
    # num_generations times and trains on each round of samples num_iterations times.
    units_per_record: int = 1

    @classmethod
    def of(cls, spec: JobSpec, *, world_size: int | None = None) -> BatchLayout:
        """The spec's layout on `world_size` ranks (by default its GPUs times its nodes,
        which is what torchrun starts: a rank passes its own)."""
        pairs = spec.objective == "dpo"
        sampled = spec.objective == "grpo"
        return cls(micro_batch_size=spec.micro_batch_size, grad_accum=spec.grad_accum,
                   world_size=spec.world_size if world_size is None else world_size,
                   seq_len=spec.seq_len, rows_per_unit=2 if pairs else 1,
                   unit="pairs" if pairs else "completions" if sampled
                   else "packed rows" if spec.packing else "examples",
                   units_per_record=spec.grpo.num_generations * spec.grpo.num_iterations
                   if sampled else 1)

    @property
    def units_per_step(self) -> int:
        """micro_batch_size x grad_accum x world_size: what one optimizer step trains on."""
        return self.micro_batch_size * self.grad_accum * self.world_size

    @property
    def tokens_per_step_at_most(self) -> int:
        """Every row of the step at seq_len (longer ones are cut to it)."""
        return self.units_per_step * self.rows_per_unit * self.seq_len

    def total_steps(self, *, max_steps: int | None, epochs: float | None,
                    unit_count: int) -> int:
        """`max_steps` as given, or enough steps to show every one of `unit_count` records
        (the tokenized training rows, pairs, or prompts) `epochs` times."""
        if max_steps is not None:
            return max_steps
        if epochs is None:
            raise ValueError("set max_steps or epochs")
        return max(1, math.ceil(epochs * unit_count * self.units_per_record
                                / self.units_per_step))

    def as_text(self) -> str:
        """E.g. "4 examples x 2 micro-batches x 2 ranks = 16 examples a step (at most 16,384
        tokens at seq_len 1024)"."""
        return (f"{self.micro_batch_size} {self.unit} x {self.grad_accum} micro-batches x "
                f"{self.world_size} ranks = {self.units_per_step} {self.unit} a step (at most "
                f"{self.tokens_per_step_at_most:,} tokens at seq_len {self.seq_len})")

    def as_json(self) -> dict[str, Any]:
        return {"micro_batch_size": self.micro_batch_size, "grad_accum": self.grad_accum,
                "world_size": self.world_size, "unit": self.unit,
                "per_step": self.units_per_step,
                "tokens_per_step_at_most": self.tokens_per_step_at_most}


@dataclass(frozen=True)
class LearningRateSchedule:
    """Linear warmup over `warmup_steps`, then `decay`: cosine or linear to 10% of the peak
    on the last step, or constant at the peak."""

    peak: float
    warmup_steps: int
    decay: str  # "cosine", "linear" or "constant" (the spec's lr_schedule)
    total_steps: int | None  # None until the data is counted (a spec of epochs)

    @classmethod
    def of(cls, spec: JobSpec, *, total_steps: int | None = None) -> LearningRateSchedule:
        """The spec's schedule over `total_steps` (by default its max_steps, if it sets them)."""
        return cls(peak=spec.learning_rate, warmup_steps=spec.warmup_steps,
                   decay=spec.lr_schedule,
                   total_steps=spec.max_steps if total_steps is None else total_steps)

    @property
    def final_rate(self) -> float:
        return self.peak if self.decay == "constant" else self.peak * FINAL_LEARNING_RATE_RATIO

    def rate(self, step: int) -> float:
        """The rate of optimizer step `step`, counted from 1 as the loop counts and logs
        them. A step past the end stays at the final rate."""
        if step <= self.warmup_steps:
            return self.peak * step / self.warmup_steps
        if self.decay == "constant":
            return self.peak
        if self.total_steps is None:
            raise ValueError("the decay spans the run's steps, which epochs count only once "
                             "the data is tokenized")
        decay_steps = max(1, self.total_steps - self.warmup_steps - 1)
        progress = min(1.0, (step - 1 - self.warmup_steps) / decay_steps)
        remaining = (0.5 * (1.0 + math.cos(math.pi * progress)) if self.decay == "cosine"
                     else 1.0 - progress)
        final_rate = self.peak * FINAL_LEARNING_RATE_RATIO
        return final_rate + (self.peak - final_rate) * remaining

    def as_json(self) -> dict[str, Any]:
        """The curve, with its rate at the landmark steps."""
        return {"warmup_steps": self.warmup_steps, "decay": self.decay, "peak": self.peak,
                "final": self.final_rate,
                "at_steps": [{"step": step, "learning_rate": self.rate(step)}
                             for step in self.landmark_steps()]}

    def landmark_steps(self) -> list[int]:
        """The steps that show the curve's shape: the first, the end of warmup and the step
        after it, the middle of the decay, the last. [] before the total is known."""
        if self.total_steps is None:
            return []
        warmup = min(self.warmup_steps, self.total_steps)
        steps = {1, warmup, warmup + 1, (warmup + 1 + self.total_steps) // 2, self.total_steps}
        return sorted(step for step in steps if 1 <= step <= self.total_steps)


def run_length(spec: JobSpec, layout: BatchLayout) -> dict[str, Any]:
    """The run's optimizer steps: the spec's max_steps, or for epochs the rule that counts
    them once the data is tokenized (`BatchLayout.total_steps`)."""
    if spec.max_steps is not None:
        return {"max_steps": spec.max_steps, "total": spec.max_steps}
    return {"epochs": spec.epochs, "total": None,
            "counted": (f"ceil({spec.epochs} x the training {layout.unit} / "
                        f"{layout.units_per_step} {layout.unit} a step), once the data is "
                        "tokenized")}


def eval_due(step: int, *, total_steps: int, every_steps: int) -> bool:
    """The eval loss is measured every `every_steps` steps (0: never on the way) and after
    the last step."""
    return step == total_steps or (every_steps > 0 and step % every_steps == 0)


def eval_count(*, total_steps: int, every_steps: int) -> int:
    """How many of the run's steps `eval_due` says yes to."""
    periodic = total_steps // every_steps if every_steps > 0 else 0
    return periodic + (0 if every_steps > 0 and total_steps % every_steps == 0 else 1)


def checkpoint_due(step: int, *, every_steps: int) -> bool:
    """A checkpoint is saved every `every_steps` steps (0: none)."""
    return every_steps > 0 and step % every_steps == 0


def checkpoint_count(*, total_steps: int, every_steps: int) -> int:
    """How many of the run's steps `checkpoint_due` says yes to."""
    return total_steps // every_steps if every_steps > 0 else 0
