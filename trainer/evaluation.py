"""The eval loss: held-out examples scored every `eval_every_steps` steps and after the last.

The eval set is a separate file (`eval_dataset`) or a seeded `eval_split` of the dataset,
split off before any training batch exists (trainer/data/eval_set.py), so a held-out example
never trains. Each rank scores its own shard with its backend's `evaluate` (no gradients,
dropout off); the summed answer-token losses and the token counts are all-reduced, so the
reported loss is the mean over every answer token of the eval set, not a mean of batch means.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunedeck.spec.job_spec import JobSpec
from tunedeck.training_steps import eval_due

from trainer.data.datasets import TokenizedExample
from trainer.rank import RankContext
from trainer.telemetry import Telemetry


def forward_only(model, function):
    """`function(model)` in eval mode (dropout off) without gradients; the model is back in
    training mode afterwards. What a backend's evaluate and a precomputed reference run."""
    import torch

    model.eval()
    try:
        with torch.no_grad():
            return function(model)
    finally:
        model.train()


@dataclass
class Evaluation:
    batches: list[dict[str, Any]]  # this rank's collated micro-batches, on the host
    every_steps: int  # 0: only after the last step
    context: RankContext
    telemetry: Telemetry
    unit: str = "answer tokens"  # what the eval loss is a mean over (the objective's)

    def run_if_due(self, backend, *, step: int, total_steps: int) -> None:
        if eval_due(step, total_steps=total_steps, every_steps=self.every_steps):
            self.run(backend, step=step)

    def run(self, backend, *, step: int) -> float:
        import torch
        import torch.distributed as dist

        totals = torch.zeros(2, dtype=torch.float64, device=self.context.device)
        for batch in self.batches:
            loss_sum, units = backend.evaluate({name: tensor.to(self.context.device)
                                                for name, tensor in batch.items()})
            totals += torch.stack([loss_sum.double(), units.double()])
        dist.all_reduce(totals)
        loss_total, units = totals.tolist()
        eval_loss = loss_total / units
        # eval_tokens counts the loss's units: answer tokens, or pairs under dpo.
        self.telemetry.eval(step=step, eval_loss=eval_loss, eval_tokens=int(units))
        if self.context.is_main:
            print(f"step {step} eval_loss {eval_loss:.4f} over {int(units)} {self.unit}", flush=True)
        return eval_loss


class NoEvaluation:
    def run_if_due(self, backend, *, step: int, total_steps: int) -> None:
        pass


def build_evaluation(rows: Sequence[TokenizedExample], *, pad_token_id: int, spec: JobSpec,
                     context: RankContext, telemetry: Telemetry,
                     objective) -> Evaluation | NoEvaluation:
    """This rank's eval micro-batches, from the eval rows (tokenized, and packed as training
    is, by trainer/data/tokenized_data.py), laid out by `objective` (trainer/objectives/) as
    training's are."""
    if not rows:
        return NoEvaluation()
    return Evaluation(batches=objective.eval_batches(rows, spec=spec, pad_token_id=pad_token_id,
                                                     context=context),
                      every_steps=spec.eval_every_steps, context=context, telemetry=telemetry,
                      unit=objective.unit)
