"""Supervised fine-tuning: the answer tokens' cross-entropy (trainer/token_loss.py), rows of
one example each (or packed), no figures beyond the loss."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tunedeck.spec.job_spec import JobSpec

from trainer.data.datasets import MicroBatch, TokenizedExample, collate_rows, micro_batches
from trainer.data.eval_set import rank_eval_batches
from trainer.rank import RankContext
from trainer.token_loss import (micro_batch_objective, model_summed_loss,
                                router_aux_loss_coefficient, summed_token_loss)


class SftObjective:
    figure_names: tuple[str, ...] = ()
    unit = "answer tokens"

    def __init__(self, *, loss_in_model: bool, aux_loss_coefficient: float):
        # Liger's fused cross-entropy takes the loss inside the model (no whole logits).
        self._loss_in_model = loss_in_model
        self._aux_loss_coefficient = aux_loss_coefficient

    @classmethod
    def for_spec(cls, spec: JobSpec, model, *, reference_model=None,
                 loss_in_model: bool = False, tokenizer=None) -> "SftObjective":
        return cls(loss_in_model=loss_in_model,
                   aux_loss_coefficient=router_aux_loss_coefficient(model))

    @classmethod
    def tokenize_splits(cls, spec: JobSpec, tokenizer, *, ranks: int, telemetry=None):
        from trainer.data.tokenized_data import tokenize_example_splits

        return tokenize_example_splits(spec, tokenizer, ranks=ranks, telemetry=telemetry)

    def micro_batches(self, rows: Sequence[TokenizedExample], *, spec: JobSpec,
                      pad_token_id: int, context: RankContext) -> Iterator[MicroBatch]:
        return micro_batches(rows, micro_batch_size=spec.micro_batch_size,
                             pad_token_id=pad_token_id, seed=spec.seed, rank=context.rank,
                             world_size=context.world_size, padding_free=spec.padding_free)

    def example_count(self, rows: Sequence[TokenizedExample]) -> int:
        return len(rows)

    def eval_batches(self, rows: Sequence[TokenizedExample], *, spec: JobSpec,
                     pad_token_id: int, context: RankContext) -> list[dict[str, Any]]:
        batches = rank_eval_batches(rows, micro_batch_size=spec.micro_batch_size,
                                    rank=context.rank, world_size=context.world_size)
        # Laid out as training's are (flash keeps packed examples apart only padding-free).
        return [collate_rows(batch, pad_token_id, padding_free=spec.padding_free)
                for batch in batches]

    def loss(self, model, batch: dict[str, Any], *, loss_weight: float):
        objective, loss_sum = micro_batch_objective(
            model, batch, loss_weight=loss_weight,
            aux_loss_coefficient=self._aux_loss_coefficient, loss_in_model=self._loss_in_model)
        return objective, loss_sum.double().reshape(1)

    def score(self, model, batch: dict[str, Any]):
        if self._loss_in_model:
            # Asked to skip the logits as in training: in eval mode Liger would make them
            # whole, memory the plan does not count. The router loss is left out, as on the
            # logits path.
            loss_sum, tokens, _aux = model_summed_loss(model, batch, self._aux_loss_coefficient,
                                                       skip_logits=True)
            return loss_sum, tokens
        inputs = {name: tensor for name, tensor in batch.items() if name != "labels"}
        return summed_token_loss(model(**inputs).logits, batch["labels"])

    def prepare(self, backend, rows, *, spec, pad_token_id, context, telemetry,
                eval_rows=()) -> None:
        pass  # nothing to compute before step 1

    def step_figures(self, step_batches, *, step, context, step_seconds) -> dict[str, Any]:
        return {}  # the loss is the step's one figure
