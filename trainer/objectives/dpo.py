"""Preference tuning (DPO and its cousins): a micro-batch of pairs is one forward of its
chosen rows then its rejected rows (trainer/data/preference_pairs.py), each side's answer
log-probability is summed over its answer tokens only (the prompt is shared), and the pair
losses of trainer/objectives/preference_loss.py compare them, with the reference's where the
loss has one.

The reference model (spec.dpo.reference):
- auto, lora/qlora: the policy itself with its adapter switched off, under no_grad: the base
  the adapter sits on, with no second copy of the weights;
- auto, full: a frozen copy of the base, wrapped by the backend as the model is (FSDP shards
  it), under no_grad;
- precomputed: every training pair's reference log-probabilities, in one forward-only pass
  before step 1 (the policy then *is* the reference: nothing has trained yet), kept in a
  small table the micro-batches carry; a full fine-tune then holds one model. A resumed run
  computes it again before it loads the checkpoint, so the table is the base's again.

Rows are stored as the tokenized data stores any (trainer/data/tokenized_data.py), a pair
as two neighbouring rows: [chosen 0, rejected 0, chosen 1, rejected 1, ...]. A micro-batch's
loss units are its pairs.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tunedeck.spec.job_spec import JobSpec

from trainer.data.datasets import MicroBatch, TokenizedExample, rank_shard_order
from trainer.data.preference_pairs import (TokenizedPair, collate_pairs, tokenize_pairs,
                                           trainable_pairs)
from trainer.objectives.preference_loss import (PairLogps, answer_logps, pair_loss,
                                                split_pairs)
from trainer.rank import RankContext
from trainer.startup.progress import Phase
from trainer.token_loss import IGNORE_INDEX

# The step figures, each a mean over the step's pairs (tunedeck/metrics/events.py).
DPO_FIGURES = ("rewards_chosen", "rewards_rejected", "reward_margin", "reward_accuracy",
               "logps_chosen", "logps_rejected")
# What the micro-batches carry beside the model's inputs.
PAIR_WEIGHTS = "pair_weights"  # 1 for a pair, 0 for an eval filler
REFERENCE_LOGPS = "reference_logps"  # [pairs, 2]: the precomputed reference, chosen/rejected
NOT_MODEL_INPUTS = ("labels", PAIR_WEIGHTS, REFERENCE_LOGPS)
# Pairs a tokenizer call: as the SFT path's chunks, a bar that moves every second or so.
TOKENIZE_CHUNK_PAIRS = 1000


class DpoObjective:
    figure_names = DPO_FIGURES
    unit = "pairs"

    def __init__(self, spec: JobSpec, *, adapter: bool, reference_model=None):
        self._settings = spec.dpo
        self._uses_reference = spec.uses_reference_model
        self._precomputed = spec.reference_mode == "precomputed"
        self._adapter_off = self._uses_reference and not self._precomputed and adapter
        self._reference_model = reference_model
        if self._uses_reference and not (self._precomputed or self._adapter_off) \
                and reference_model is None:
            raise ValueError("dpo: reference auto for a full fine-tune needs the frozen copy")
        # [pairs, 2] of the training and the eval pairs, once prepare() computed them.
        self._reference_table = self._eval_reference_table = None

    @classmethod
    def for_spec(cls, spec: JobSpec, model, *, reference_model=None,
                 loss_in_model: bool = False, tokenizer=None) -> "DpoObjective":
        # loss_in_model is not taken: the pair losses need the logits themselves.
        from trainer.model.method import uses_adapter

        return cls(spec, adapter=uses_adapter(spec), reference_model=reference_model)

    # The data: pairs, tokenized as two rows each.

    @classmethod
    def tokenize_splits(cls, spec: JobSpec, tokenizer, *, ranks: int, telemetry=None):
        from trainer.data.eval_set import load_train_and_eval_records
        from trainer.data.preference_data import load_spec_pairs
        from trainer.data.tokenized_data import tokenize_train_and_eval

        # Held out as examples are: a separate eval_dataset, or a seeded eval_split.
        pairs, eval_pairs = load_train_and_eval_records(spec, ranks=ranks, load=load_spec_pairs,
                                                        what="pairs")
        train, evaluated = tokenize_train_and_eval(
            spec, pairs, eval_pairs, telemetry=telemetry,
            tokenize=lambda records, phase, source: _tokenize_in_chunks(
                tokenizer, records, spec.seq_len, phase=phase, source=source))
        return {"rows": {"train": pair_rows(train), "eval": pair_rows(evaluated)},
                "train_examples": len(pairs)}

    def example_count(self, rows: Sequence[TokenizedExample]) -> int:
        return len(rows) // 2

    def micro_batches(self, rows: Sequence[TokenizedExample], *, spec: JobSpec,
                      pad_token_id: int, context: RankContext) -> Iterator[MicroBatch]:
        pair_count, size = len(rows) // 2, spec.micro_batch_size
        if pair_count < size * context.world_size:
            raise ValueError(f"dataset has {pair_count} usable pairs; need at least "
                             f"micro_batch_size x ranks = {size * context.world_size}")
        epoch = 0
        while True:
            order = rank_shard_order(pair_count, seed=spec.seed, epoch=epoch, rank=context.rank,
                                     world_size=context.world_size)
            for start in range(0, len(order) - size + 1, size):
                yield self._micro_batch(rows, order[start:start + size], pad_token_id)
            epoch += 1

    def eval_batches(self, rows: Sequence[TokenizedExample], *, spec: JobSpec,
                     pad_token_id: int, context: RankContext) -> list[dict[str, Any]]:
        indices = filled_shard(len(rows) // 2, micro_batch_size=spec.micro_batch_size,
                               rank=context.rank, world_size=context.world_size)
        batches = []
        for batch in indices:
            inputs = collate_pairs([pair_at(rows, index) for index, _ in batch], pad_token_id)
            inputs[PAIR_WEIGHTS] = _weights([weight for _, weight in batch])
            if self._eval_reference_table is not None:
                inputs[REFERENCE_LOGPS] = self._eval_reference_table[[index for index, _ in batch]]
            batches.append(inputs)
        return batches

    def _micro_batch(self, rows, indices: list[int], pad_token_id: int) -> MicroBatch:
        pairs = [pair_at(rows, index) for index in indices]
        inputs = collate_pairs(pairs, pad_token_id)
        inputs[PAIR_WEIGHTS] = _weights([1.0] * len(pairs))
        if self._reference_table is not None:
            inputs[REFERENCE_LOGPS] = self._reference_table[indices]
        row_lengths = tuple(len(row.input_ids) for pair in pairs
                            for row in (pair.chosen, pair.rejected))
        return MicroBatch(inputs, token_count=sum(row_lengths), loss_tokens=len(pairs),
                          row_lengths=row_lengths)

    # The loss.

    def loss(self, model, batch: dict[str, Any], *, loss_weight: float):
        per_pair, result, policy = self._pair_losses(model, batch)
        weights = batch[PAIR_WEIGHTS].to(per_pair.dtype)
        loss_sum = (per_pair * weights).sum()
        import torch

        figures = torch.stack([loss_sum.detach(), *(
            (value.detach() * weights).sum() for value in (
                result.chosen_rewards, result.rejected_rewards, result.margins,
                result.accuracies, policy.chosen.detach(), policy.rejected.detach()))])
        return loss_sum * loss_weight, figures.double()

    def score(self, model, batch: dict[str, Any]):
        per_pair, _result, _policy = self._pair_losses(model, batch)
        weights = batch[PAIR_WEIGHTS].to(per_pair.dtype)
        return (per_pair * weights).sum(), weights.sum()

    def _pair_losses(self, model, batch: dict[str, Any]):
        inputs = {name: tensor for name, tensor in batch.items() if name not in NOT_MODEL_INPUTS}
        labels = batch["labels"]
        # The reference first: its activations are gone before the policy's are kept.
        reference = self._reference_logps(model, inputs, batch)
        policy = split_pairs(*answer_logps(model(**inputs).logits, labels))
        settings = self._settings
        result = pair_loss(policy, reference, loss=settings.loss, beta=settings.beta,
                           label_smoothing=settings.label_smoothing,
                           simpo_gamma=settings.simpo_gamma)
        per_pair = result.per_pair
        if settings.sft_term_weight:
            # The chosen answer's mean token cross-entropy (RPO; ORPO's SFT term).
            per_pair = per_pair - settings.sft_term_weight * policy.chosen_mean
        return per_pair, result, policy

    def _reference_logps(self, model, inputs: dict[str, Any], batch: dict[str, Any]):
        import torch

        if not self._uses_reference:
            return None
        labels = batch["labels"]
        if self._precomputed:
            table = batch[REFERENCE_LOGPS].to(labels.device)
            tokens = (labels[:, 1:] != IGNORE_INDEX).sum(dim=1)
            return PairLogps(table[:, 0], table[:, 1], *tokens.chunk(2, dim=0))
        if self._adapter_off:
            # In eval mode, as the frozen copy and a precomputed table are scored: dropout
            # off, so all three references are the same function of the base.
            from trainer.evaluation import forward_only

            with adapter_disabled(model):
                logits = forward_only(model, lambda model: model(**inputs).logits)
        else:
            with torch.no_grad():
                logits = self._reference_model(**inputs).logits
        return split_pairs(*answer_logps(logits, labels))

    def step_figures(self, step_batches, *, step, context, step_seconds) -> dict[str, Any]:
        return {}  # every figure is a mean over the pairs (`loss`)

    # Before step 1.

    def prepare(self, backend, rows, *, spec: JobSpec, pad_token_id: int,
                context: RankContext, telemetry, eval_rows=()) -> None:
        """reference precomputed: every pair's reference log-probabilities, the training
        pairs' and the eval pairs', each rank scoring its share, summed over ranks into
        tables every rank holds."""
        if not self._precomputed:
            return
        started = time.perf_counter()
        forward_only = backend.forward_only
        self._reference_table = reference_table(forward_only, rows, spec=spec,
                                                pad_token_id=pad_token_id, context=context)
        if len(eval_rows):
            self._eval_reference_table = reference_table(
                forward_only, eval_rows, spec=spec, pad_token_id=pad_token_id, context=context)
        if context.is_main:
            pairs = (len(rows) + len(eval_rows)) // 2
            telemetry.notice(f"reference log-probabilities of {pairs:,} pairs computed in "
                             f"{time.perf_counter() - started:.1f} s (reference precomputed)")


def reference_table(forward_only, rows, *, spec: JobSpec, pad_token_id: int,
                    context: RankContext):
    """[pairs, 2]: each pair's chosen and rejected log-probabilities under the model as it
    is now, each rank scoring its share (`filled_shard`), one all-reduce summing them."""
    import torch
    import torch.distributed as dist

    pair_count = len(rows) // 2
    table = torch.zeros(pair_count, 2, dtype=torch.float64, device=context.device)
    for batch in filled_shard(pair_count, micro_batch_size=spec.micro_batch_size,
                              rank=context.rank, world_size=context.world_size):
        inputs = {name: tensor.to(context.device) for name, tensor in collate_pairs(
            [pair_at(rows, index) for index, _ in batch], pad_token_id).items()}
        model_inputs = {name: tensor for name, tensor in inputs.items() if name != "labels"}
        logps = forward_only(lambda model: split_pairs(
            *answer_logps(model(**model_inputs).logits, inputs["labels"])))
        values = torch.stack([logps.chosen, logps.rejected], dim=1).double()
        for row, (index, weight) in enumerate(batch):
            if weight:
                table[index] = values[row]
    dist.all_reduce(table)
    return table.float().cpu()


def pair_rows(pairs: list[TokenizedPair]) -> list[TokenizedExample]:
    """Pairs as the rows the tokenized data stores: chosen, rejected, chosen, ..."""
    return [row for pair in pairs for row in (pair.chosen, pair.rejected)]


def pair_at(rows: Sequence[TokenizedExample], index: int) -> TokenizedPair:
    return TokenizedPair(rows[2 * index], rows[2 * index + 1])


def filled_shard(pair_count: int, *, micro_batch_size: int, rank: int,
                 world_size: int) -> list[list[tuple[int, float]]]:
    """This rank's share of the pairs, (index, weight) in micro-batches; every rank gets as
    many micro-batches, a short share topped up with its first pair at weight 0 (an FSDP
    forward is a collective every rank must join)."""
    share = list(range(rank, pair_count, world_size)) or [0]
    batch_count = math.ceil(math.ceil(pair_count / world_size) / micro_batch_size)
    weighted = [(index, 1.0) for index in range(rank, pair_count, world_size)]
    weighted += [(share[0], 0.0)] * (batch_count * micro_batch_size - len(weighted))
    return [weighted[start:start + micro_batch_size]
            for start in range(0, len(weighted), micro_batch_size)]


def _weights(values: list[float]):
    import torch

    return torch.tensor(values, dtype=torch.float32)


def _tokenize_in_chunks(tokenizer, pairs, seq_len: int, *, phase: Phase,
                        source: str) -> list[TokenizedPair]:
    from trainer.data.tokenized_data import tokenize_in_chunks

    tokenized = tokenize_in_chunks(
        pairs, lambda chunk: tokenize_pairs(tokenizer, chunk, seq_len, source=source),
        phase=phase, chunk_records=TOKENIZE_CHUNK_PAIRS)
    return trainable_pairs(tokenized, seq_len=seq_len, source=source)


@contextmanager
def adapter_disabled(model):
    """The adapter switched off for the reference forward: peft's own switch, on the
    PeftModel a backend wraps (DeepSpeed's engine holds it as `.module`)."""
    peft_model = model if hasattr(model, "disable_adapter") else model.module
    with peft_model.disable_adapter():
        yield
