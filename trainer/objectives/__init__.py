"""What a step optimises, in one place: supervised fine-tuning (sft.py) and preference tuning
(dpo.py) are two small modules beside each other, each owning its batch layout, its loss and
the figures a step reports. The training loop, the evaluation and both backends speak only
`TrainingObjective`; `build_objective` picks one from `spec.objective` by table, so nothing
else names an objective.

A step's loss is a mean over the step's *loss units* on every rank: answer tokens for sft
(trainer/token_loss.py says why), pairs for dpo. A micro-batch's `loss_tokens` counts its
units, and `loss()` returns the micro-batch's summed loss times the step's weight (world
size / the step's units), so the same global batch trains the same model however it is
split, whichever the objective.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Callable, Protocol

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

    def prepare(self, forward_only: Callable, rows: Sequence[TokenizedExample], *,
                spec: JobSpec, pad_token_id: int, context: RankContext, telemetry,
                eval_rows: Sequence[TokenizedExample] = ()) -> None:
        """Work before step 1 (and before the eval batches are made) with the freshly
        wrapped model (`forward_only(fn)` runs fn(model) in eval mode without gradients):
        dpo's precomputed reference pass over the training and the eval pairs."""


def objective_type(spec: JobSpec) -> type[TrainingObjective]:
    """The spec's objective's class: its `tokenize_splits` runs before any model exists."""
    from trainer.objectives.dpo import DpoObjective
    from trainer.objectives.sft import SftObjective

    return {"sft": SftObjective, "dpo": DpoObjective}[spec.objective]


def build_objective(spec: JobSpec, model, *, reference_model=None,
                    loss_in_model: bool = False) -> TrainingObjective:
    """The spec's objective for `model` (before the backend wraps it); `reference_model`: a
    frozen copy, wrapped by the backend, for a full fine-tune's DPO reference."""
    return objective_type(spec).for_spec(spec, model, reference_model=reference_model,
                                         loss_in_model=loss_in_model)


def needs_frozen_reference(spec: JobSpec) -> bool:
    """A full fine-tune's DPO with reference auto keeps a frozen copy of the base (an
    adapter's base is its own reference: the adapter switched off)."""
    from trainer.model.method import uses_adapter

    return (spec.uses_reference_model and spec.dpo.reference == "auto"
            and not uses_adapter(spec))
