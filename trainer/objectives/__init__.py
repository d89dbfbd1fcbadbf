"""What a step optimises, in one place: supervised fine-tuning (sft.py), preference tuning
(dpo.py) and reinforcement learning from rewards on sampled completions (grpo.py) are small
modules beside each other, each owning its batch layout, its loss and the figures a step
reports. The training loop, the evaluation and both backends speak only
`TrainingObjective`; `build_objective` picks one from `spec.objective` by table, so nothing
else names an objective.

A step's loss is a mean over the step's *loss units* on every rank: answer tokens for sft
(trainer/token_loss.py says why), pairs for dpo. A micro-batch's `loss_tokens` counts its
units, and `loss()` returns the micro-batch's summed loss times the step's weight (world
size / the step's units), so the same global batch trains the same model however it is
split, whichever the objective. (grpo's units depend on its loss_type: grpo.py says which.)
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from tunedeck.spec.job_spec import JobSpec

from trainer.data.datasets import MicroBatch, TokenizedExample
from trainer.rank import RankContext


class TrainingObjective(Protocol):
    # The step's figures besides the loss, each a mean over the step's loss units, in the
    # order `loss()` returns their sums (tunedeck/metrics/events.py spells them).
    figure_names: tuple[str, ...]
    # What the loss is a mean over, in words ("answer tokens", "pairs").
    unit: str

    @classmethod
    def tokenize_splits(cls, spec: JobSpec, tokenizer, *, ranks: int,
                        telemetry=None) -> dict[str, Any]:
        """{"rows": {"train": rows, "eval": rows}, "train_examples": n}: the records read,
        split and tokenized into the rows trainer/data/tokenized_data.py stores."""

    def micro_batches(self, rows: Sequence[TokenizedExample], *, spec: JobSpec,
                      pad_token_id: int, context: RankContext) -> Iterator[MicroBatch]:
        """This rank's endless micro-batches (epoch after epoch)."""

    def example_count(self, rows: Sequence[TokenizedExample]) -> int:
        """What one epoch counts (rows for sft, pairs for dpo): the step count reads it."""

    def eval_batches(self, rows: Sequence[TokenizedExample], *, spec: JobSpec,
                     pad_token_id: int, context: RankContext) -> list[dict[str, Any]]:
        """This rank's eval micro-batches; every rank gets as many (an FSDP forward is a
        collective), a rank's filler counting for nothing."""

    def loss(self, model, batch: dict[str, Any], *, loss_weight: float) -> tuple[Any, Any]:
        """One micro-batch's forward: (the tensor to call backward on, the detached sums
        [loss, *figures] over its loss units, fp64)."""

    def score(self, model, batch: dict[str, Any]) -> tuple[Any, Any]:
        """Forward only, already in eval mode without gradients: (summed loss, loss units)."""

    def step_figures(self, step_batches: list[MicroBatch], *, step: int, context: RankContext,
                     step_seconds: float) -> dict[str, Any]:
        """The step's figures that are not means over its loss units (grpo's rewards and
        completion lengths, from its round of samples), over every rank: a collective.
        Empty for sft and dpo. (grpo also keeps a rollout every grpo.rollouts_every steps.)"""

    def prepare(self, backend, rows: Sequence[TokenizedExample], *,
                spec: JobSpec, pad_token_id: int, context: RankContext, telemetry,
                eval_rows: Sequence[TokenizedExample] = ()) -> None:
        """Work before step 1 (and before the eval batches are made) with the freshly
        wrapped model (trainer/backends/: `backend.forward_only(fn)` runs fn(model) in eval
        mode without gradients, `backend.sample(fn)` with the whole model to generate
        with): dpo's precomputed reference pass over the training and the eval pairs;
        grpo keeps the backend to sample its rounds with."""


def objective_type(spec: JobSpec) -> type[TrainingObjective]:
    """The spec's objective's class: its `tokenize_splits` runs before any model exists."""
    from trainer.objectives.dpo import DpoObjective
    from trainer.objectives.grpo import GrpoObjective
    from trainer.objectives.sft import SftObjective

    return {"sft": SftObjective, "dpo": DpoObjective, "grpo": GrpoObjective}[spec.objective]


def build_objective(spec: JobSpec, model, *, reference_model=None, loss_in_model: bool = False,
                    tokenizer=None) -> TrainingObjective:
    """The spec's objective for `model` (before the backend wraps it); `reference_model`: a
    frozen copy, wrapped by the backend, for a full fine-tune's reference (dpo, grpo with
    beta above 0); `tokenizer`: what grpo decodes its completions with for the rewards."""
    return objective_type(spec).for_spec(spec, model, reference_model=reference_model,
                                         loss_in_model=loss_in_model, tokenizer=tokenizer)


def needs_frozen_reference(spec: JobSpec) -> bool:
    """A full fine-tune's DPO with reference auto, or GRPO with a KL term, keeps a frozen
    copy of the base (an adapter's base is its own reference: the adapter switched off)."""
    from trainer.model.method import uses_adapter

    return spec.reference_mode == "auto" and not uses_adapter(spec)
