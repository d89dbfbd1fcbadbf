"""The eval loss: held-out examples scored every `eval_every_steps` steps and after the last.

The eval set is a separate file (`eval_dataset`) or a seeded `eval_split` of the dataset,
split off before any training batch exists, so a held-out example never trains. Each rank
scores its own shard with its backend's `evaluate` (no gradients, dropout off); the summed
answer-token losses and the token counts are all-reduced, so the reported loss is the mean
over every answer token of the eval set, not a mean of batch means.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunedeck.data.records import Example, eval_split_problem, split_eval_examples
from tunedeck.spec.job_spec import JobSpec

from trainer.token_loss import IGNORE_INDEX
from trainer.data.datasets import TokenizedExample, load_spec_examples
from trainer.rank import RankContext
from trainer.telemetry import Telemetry


def load_train_and_eval_examples(spec: JobSpec, *, ranks: int) -> tuple[list[Example], list[Example]]:
    """(training examples, eval examples); the latter empty when the spec has no eval."""
    examples = load_spec_examples(spec)
    if spec.eval_dataset is not None:
        return examples, load_spec_examples(spec, field="eval_dataset")
    problem = eval_split_problem(len(examples), fraction=spec.eval_split,
                                 micro_batch_size=spec.micro_batch_size, ranks=ranks)
    if problem:
        raise ValueError(f"{problem} (dataset {spec.dataset})")
    if spec.eval_split == 0:
        return examples, []
    return split_eval_examples(examples, fraction=spec.eval_split, seed=spec.seed)


def eval_source(spec: JobSpec) -> str:
    """How errors about the eval set name it."""
    if spec.eval_dataset is not None:
        return f"eval_dataset {spec.eval_dataset}"
    return f"eval_split {spec.eval_split} of dataset {spec.dataset}"


def score_micro_batch(model, batch: dict[str, Any], *, loss_in_model: bool = False,
                      aux_loss_coefficient: float = 0.0) -> tuple[Any, Any]:
    """Supervised fine-tuning's (summed answer-token loss, answer-token count) of one
    micro-batch, in eval mode and without gradients (trainer/objectives/sft.py's score)."""
    from trainer.objectives.sft import SftObjective

    objective = SftObjective(loss_in_model=loss_in_model, aux_loss_coefficient=aux_loss_coefficient)
    return forward_only(model, lambda model: objective.score(model, batch))


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


def rank_eval_batches(rows: Sequence[TokenizedExample], *, micro_batch_size: int, rank: int,
                      world_size: int) -> list[list[TokenizedExample]]:
    """This rank's share of the eval rows, in micro-batches. Every rank gets the same number
    of micro-batches: an FSDP forward gathers parameters, a collective all ranks must join.
    A rank whose share runs out first scores a filler row with no labels (no loss, no tokens)."""
    share = rows[rank::world_size]
    batch_count = math.ceil(math.ceil(len(rows) / world_size) / micro_batch_size)
    batches = [share[start:start + micro_batch_size] for start in range(0, len(share), micro_batch_size)]
    filler = TokenizedExample(input_ids=rows[0].input_ids, labels=[IGNORE_INDEX] * len(rows[0].labels),
                              position_ids=rows[0].position_ids)
    return batches + [[filler]] * (batch_count - len(batches))


@dataclass
class Evaluation:
    batches: list[dict[str, Any]]  # this rank's collated micro-batches, on the host
    every_steps: int  # 0: only after the last step
    context: RankContext
    telemetry: Telemetry
    unit: str = "answer tokens"  # what the eval loss is a mean over (the objective's)

    def run_if_due(self, backend, *, step: int, total_steps: int) -> None:
        if step == total_steps or (self.every_steps and step % self.every_steps == 0):
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
                     objective=None) -> Evaluation | NoEvaluation:
    """This rank's eval micro-batches, from the eval rows (tokenized, and packed as training
    is, by trainer/data/tokenized_data.py), laid out by the objective as training's are."""
    if not rows:
        return NoEvaluation()
    if objective is None:
        from trainer.objectives.sft import SftObjective

        objective = SftObjective(loss_in_model=False, aux_loss_coefficient=0.0)
    return Evaluation(batches=objective.eval_batches(rows, spec=spec, pad_token_id=pad_token_id,
                                                     context=context),
                      every_steps=spec.eval_every_steps, context=context, telemetry=telemetry,
                      unit=objective.unit)
