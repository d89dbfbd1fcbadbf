"""The distributed backends behind one small interface, chosen once from `spec.backend`.

The training loop speaks only `TrainingBackend`: `step` runs one micro-batch forward and
backward (the loop says how much each micro-batch weighs: trainer/token_loss.py),
`optimizer_step` closes a step of `grad_accum` micro-batches, and
`gather_trainable_state` hands rank 0 the fp32 weights to export. How gradients are
reduced, sharded, clipped and cast stays inside each backend.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

from trainer.rank import RankContext
from tunedeck.backends import BACKENDS, backend_named


class TrainingBackend(Protocol):
    @classmethod
    def startup_notice(cls, settings: dict[str, Any], context: RankContext) -> str | None:
        """A sentence for the job's events when this launch will sit at step 0 for a while
        for a reason of the backend's own (ZeRO-2: ops to compile), else None."""

    @classmethod
    def init_distributed(cls, context: RankContext) -> None:
        """Join the process group (gloo on CPU, nccl on GPU)."""

    @classmethod
    def wrap(cls, model, settings: dict[str, Any], context: RankContext, *,
             objective) -> "TrainingBackend":
        """Take ownership of `model`; `settings` is the run folder's generated config.
        `objective` (trainer/objectives/) computes each micro-batch's loss."""

    @classmethod
    def wrap_frozen(cls, model, settings: dict[str, Any], context: RankContext):
        """A frozen model placed as the backend places the trained one (a DPO reference
        copy): the module to forward under no_grad."""

    def set_learning_rate(self, learning_rate: float) -> None: ...

    def step(self, batch: dict[str, Any], *, loss_weight: float) -> "torch.Tensor":  # noqa: F821
        """Forward and backward of one micro-batch: backward of its summed loss times
        `loss_weight`, gradients summed over the step's micro-batches and averaged over
        ranks, nothing else scaled. Returns the objective's detached sums [loss, *figures]
        (no sync)."""

    def evaluate(self, batch: dict[str, Any]) -> tuple["torch.Tensor", "torch.Tensor"]:  # noqa: F821
        """Forward only, in eval mode: one micro-batch's summed loss and its loss units
        (no sync; the caller all-reduces both)."""

    def forward_only(self, function):
        """`function(model)` in eval mode without gradients (every rank alike: an FSDP
        forward is a collective)."""

    def sample(self, function):
        """`function(model)` in eval mode without gradients, `model` whole enough to call
        `generate` on (every rank alike, until every rank's generation is done: an FSDP
        forward is a collective)."""

    def optimizer_step(self) -> "torch.Tensor":  # noqa: F821
        """Clip and apply the accumulated gradients; the global norm before clipping."""

    def footprint(self) -> "Footprint":  # noqa: F821
        """Bytes of parameters, gradients and optimizer state this rank holds (gradients as
        measured at the first step's update, when they exist)."""

    def gather_trainable_state(self) -> dict[str, Any]:
        """Full fp32 trainable weights by parameter name on rank 0 (empty elsewhere).
        Every rank must call it: the gather is a collective."""

    def save_checkpoint(self, path: Path) -> None:
        """Write this rank's part of the trainable weights and optimizer state into the
        existing folder `path`, in the backend's own format. A collective."""

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote, into this freshly wrapped backend."""


def backend_class(name: str) -> type[TrainingBackend]:
    """The engine the backend named `name` names (tunedeck/backends/), imported on demand:
    a ZeRO-2 run never loads FSDP code, an FSDP run never DeepSpeed."""
    backend = backend_named(name)
    if backend is None:
        raise ValueError(f"backend {name}: unknown; use one of {', '.join(BACKENDS)}")
    module, _, engine = backend.engine.partition(":")
    return getattr(importlib.import_module(module), engine)
