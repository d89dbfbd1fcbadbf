"""Online reinforcement learning (GRPO): each round, the ranks sample `num_generations`
completions (a group) for each of their prompts with the policy itself, score them with the
spec's rewards (tunedeck/rewards/scorers.py), turn each group's rewards into advantages,
and take the clipped policy-gradient step of trainer/objectives/grpo_loss.py on them.

Where the sampling sits: inside this rank's micro-batch stream (`RolloutStream`). The
training loop draws a step's micro-batches before its first forward; drawing the first of
a round samples the whole round (micro_batch_size × grad_accum completions on this rank),
so the loop, the backends and the loss units stay as they are for sft and dpo. A round is
trained on for `num_iterations` steps, the later ones clipping the ratio to the policy that
sampled it. Sampling uses the model as the backend holds it (`forward_only`): ZeRO-2's
engine holds whole weights; FSDP2 gathers each layer for each forward and frees it after,
so no second copy of the weights is made, and every rank keeps generating until all are
done (`synced_gpus`: a forward is a collective). LoRA samples with its adapter on.

A round's seed is the job's seed, the round and the rank, so a resumed run (which skips the
rounds it trained without sampling them) samples what the first run would have.

Loss units (trainer/objectives/__init__.py): what the step's loss is a mean over, per
`loss_type`: dapo completion tokens, grpo completions (each its token mean), dr_grpo
completions × max_completion_length, bnpo micro-batches (each its token mean): the step's
loss is then TRL's (tests/trainer/test_grpo_loss.py holds the micro-batch mathematics to it).
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunedeck.data.prompt_records import PromptRecord
from tunedeck.rewards.scorers import reward_label, total_rewards
from tunedeck.spec.job_spec import JobSpec

from trainer.data.datasets import MicroBatch, TokenizedExample, rank_shard_order
from trainer.objectives.grpo_loss import LossSettings, group_advantages, grpo_loss
from trainer.rank import RankContext
from trainer.token_loss import IGNORE_INDEX

# The figures a step's forwards report, each a mean over the step's loss units.
LOSS_FIGURES = ("clip_ratio_low", "clip_ratio_high", "entropy")
KL_FIGURE = "kl"
# What a micro-batch carries beside the model's inputs.
COMPLETION_IDS = "completion_ids"  # [rows, completion width]
COMPLETION_MASK = "completion_mask"  # 1 for a completion token the loss covers
ADVANTAGES = "advantages"  # [rows]
OLD_LOGPS = "old_logps"  # [rows, completion width], num_iterations > 1
REFERENCE_LOGPS = "reference_logps"  # [rows, completion width], beta > 0
NOT_MODEL_INPUTS = (COMPLETION_IDS, COMPLETION_MASK, ADVANTAGES, OLD_LOGPS, REFERENCE_LOGPS)
# Rows of the completion logits whose entropy is measured at once (a [rows, width, vocab]
# temporary each).
ENTROPY_CHUNK_ROWS = 4


class GrpoObjective:
    def __init__(self, spec: JobSpec, *, tokenizer, adapter: bool, reference_model=None):
        self._spec = spec
        self._grpo = spec.grpo
        self._tokenizer = tokenizer
        grpo = spec.grpo
        self._settings = LossSettings(loss_type=grpo.loss_type, beta=grpo.beta,
                                      epsilon=grpo.epsilon, epsilon_high=grpo.upper_clip,
                                      max_completion_length=grpo.max_completion_length)
        self._uses_reference = spec.uses_reference_model
        self._adapter_off = self._uses_reference and adapter
        self._reference_model = reference_model
        if self._uses_reference and not adapter and reference_model is None:
            raise ValueError("grpo: beta above 0 in a full fine-tune needs the frozen copy")
        self.figure_names = LOSS_FIGURES + ((KL_FIGURE,) if self._uses_reference else ())
        self.unit = {"dapo": "completion tokens", "grpo": "completions",
                     "dr_grpo": "completion token slots", "bnpo": "micro-batches"}[grpo.loss_type]
        self._forward_only = self._sample = None  # the backend's, once prepare() has them
        self._telemetry = None
        self._records: list[PromptRecord] = []
        self._labels = [reward_label(reward, grpo.rewards) for reward in grpo.rewards]
        self.dropout_turned_off = 0  # dropout layers `for_spec` set to 0

    @classmethod
    def for_spec(cls, spec: JobSpec, model, *, reference_model=None, loss_in_model: bool = False,
                 tokenizer=None) -> "GrpoObjective":
        # loss_in_model is not taken: the log-probabilities need the logits themselves.
        from trainer.model.method import uses_adapter

        objective = cls(spec, tokenizer=tokenizer, adapter=uses_adapter(spec),
                        reference_model=reference_model)
        objective.dropout_turned_off = without_dropout(model)
        return objective

    # The data: prompts, tokenized under the training template, a prompt's start cut so that
    # it and its longest completion fit seq_len.

    @classmethod
    def tokenize_splits(cls, spec: JobSpec, tokenizer, *, ranks: int, telemetry=None):
        from trainer.data.prompt_data import load_spec_prompts

        records = load_spec_prompts(spec)
        rows = tokenize_prompts(tokenizer, records, room=prompt_room(spec))
        return {"rows": {"train": rows, "eval": []}, "train_examples": len(records)}

    def example_count(self, rows: Sequence[TokenizedExample]) -> int:
        return len(rows)

    def prepare(self, backend, rows, *, spec: JobSpec, pad_token_id: int,
                context: RankContext, telemetry, eval_rows=()) -> None:
        """Keep the backend (rounds are sampled and scored through it) and read the
        columns the rewards score against, record by record as the rows were tokenized."""
        from trainer.data.prompt_data import load_spec_prompts

        self._forward_only, self._sample = backend.forward_only, backend.sample
        self._telemetry = telemetry  # where the kept rollouts go
        if self.dropout_turned_off and context.is_main:
            telemetry.notice(f"objective grpo trains without dropout ({self.dropout_turned_off} "
                             "dropout layers set to 0, lora.dropout among them): a round's "
                             "ratio to the policy that sampled it, and its KL to the reference, "
                             "are 1 and 0 until the policy moves")
        self._records = load_spec_prompts(spec)
        if len(self._records) != len(rows):
            raise ValueError(f"dataset {spec.dataset}: {len(self._records)} prompts read, "
                             f"{len(rows)} tokenized: the data changed while the job started")
        full = sum(1 for row in rows if len(row.input_ids) >= prompt_room(spec))
        if full and context.is_main:
            telemetry.notice(f"{full:,} of {len(rows):,} prompts fill the "
                             f"{prompt_room(spec)} tokens seq_len leaves beside "
                             "max_completion_length (a longer one lost its start: Check data "
                             "counts them)")

    def micro_batches(self, rows: Sequence[TokenizedExample], *, spec: JobSpec,
                      pad_token_id: int, context: RankContext) -> "RolloutStream":
        prompts_per_round = spec.micro_batch_size * spec.grad_accum // self._grpo.num_generations
        if len(rows) < prompts_per_round * context.world_size:
            raise ValueError(f"dataset has {len(rows)} prompts; a round needs "
                             f"{prompts_per_round} a rank on {context.world_size} ranks")
        return RolloutStream(self, rows, spec=spec, pad_token_id=pad_token_id, context=context)

    def eval_batches(self, rows, *, spec, pad_token_id, context) -> list[dict[str, Any]]:
        return []  # the spec refuses an eval set for grpo

    def score(self, model, batch):
        raise NotImplementedError("objective grpo has no eval loss")

    # A round: sample, score, advantages, and the log-probs the loss compares with.

    def sample_round(self, prompt_indices: list[int], rows, *, pad_token_id: int,
                     context: RankContext, round_index: int) -> "Round":
        import torch

        grpo, started = self._grpo, time.perf_counter()
        prompt_ids = [list(rows[index].input_ids) for index in prompt_indices
                      for _ in range(grpo.num_generations)]
        input_ids, attention_mask = left_padded(prompt_ids, pad_token_id)
        input_ids, attention_mask = input_ids.to(context.device), attention_mask.to(context.device)
        with torch.random.fork_rng(devices=[context.device] if context.uses_cuda else []):
            torch.manual_seed(round_seed(self._spec.seed, round_index, context.rank))
            sequences = self._sample(lambda model: generate_plainly(
                model, input_ids=input_ids, attention_mask=attention_mask,
                generation_config=self._generation_config(pad_token_id),
                synced_gpus=context.world_size > 1))
        completion_ids = sequences[:, input_ids.shape[1]:]
        completion_mask, truncated = completion_masks(completion_ids, self._stop_ids())
        lengths = completion_mask.sum(dim=1)
        sampled = time.perf_counter()
        texts = self._tokenizer.batch_decode(
            [ids[:int(length)] for ids, length in zip(completion_ids.tolist(),
                                                      completion_mask.sum(dim=1).tolist())],
            skip_special_tokens=True)
        records = [self._records[index] for index in prompt_indices
                   for _ in range(grpo.num_generations)]
        totals, each = total_rewards(
            list(grpo.rewards), [record.prompt_text for record in records], texts,
            {name: [record.columns[name] for record in records] for name in grpo.reward_columns})
        rewards = torch.tensor(totals, dtype=torch.float32)
        advantages = group_advantages(
            rewards, grpo.num_generations, grpo.scale_rewards,
            batch_std=step_reward_std(rewards, context) if grpo.scale_rewards == "batch" else None)
        scored = time.perf_counter()
        if grpo.mask_truncated_completions:
            completion_mask = completion_mask * (~truncated).unsqueeze(1).long()
        report = RoundReport.of(rewards, each, self._labels, advantages.std_is_zero,
                                grpo.num_generations, lengths, truncated,
                                sampling_seconds=sampled - started,
                                scoring_seconds=scored - sampled,
                                samples=rollout_samples(records, texts, totals, each,
                                                        grpo.num_generations,
                                                        grpo.rollout_prompts))
        return Round(input_ids.cpu(), attention_mask.cpu(), completion_ids.cpu(),
                     completion_mask.cpu(), advantages.values, report,
                     [record.prompt_text for record in records], texts, totals)

    def _generation_config(self, pad_token_id: int):
        from transformers import GenerationConfig

        grpo = self._grpo
        # Every setting that shapes the distribution is given: a value left unset is taken
        # from the model's own generation_config (a checkpoint's top_k 20, a repetition
        # penalty), and the completions would no longer be the policy's samples the loss
        # takes them for. top_k 0 and min_p 0 keep every token.
        return GenerationConfig(max_new_tokens=grpo.max_completion_length, do_sample=True,
                                temperature=grpo.temperature, top_p=grpo.top_p,
                                top_k=grpo.top_k, min_p=0.0, typical_p=1.0,
                                repetition_penalty=1.0, no_repeat_ngram_size=0,
                                min_new_tokens=0, pad_token_id=pad_token_id,
                                eos_token_id=self._stop_ids(), use_cache=True)

    def _stop_ids(self) -> list[int]:
        """Where a completion ends: the tokenizer's end of sequence, and the training
        template's end of turn where it has its own token (ChatML's <|im_end|>)."""
        from trainer.data.chat_format import end_of_turn_ids

        return end_of_turn_ids(self._tokenizer)

    def round_micro_batches(self, sampled: "Round", *, context: RankContext,
                            pad_token_id: int) -> list[MicroBatch]:
        """The round's rows as `grad_accum` micro-batches, each trimmed to its own widths,
        with the reference's (beta > 0) and the sampling policy's (num_iterations > 1)
        log-probabilities, computed here, before any step moves the policy."""
        size = self._spec.micro_batch_size
        batches = []
        for start in range(0, len(sampled.completion_ids), size):
            rows = slice(start, start + size)
            inputs = trimmed_inputs(sampled, rows)
            mask = inputs[COMPLETION_MASK]
            device_inputs = {name: tensor.to(context.device) for name, tensor in inputs.items()}
            if self._grpo.num_iterations > 1:
                inputs[OLD_LOGPS] = self._forward_only(
                    lambda model: self._completion_logps(model, device_inputs)).cpu()
            if self._uses_reference:
                inputs[REFERENCE_LOGPS] = self._reference_logps(device_inputs).cpu()
            rows_here = len(mask)
            token_count = int(inputs["attention_mask"].sum())
            lengths = tuple(int(value) for value in inputs["attention_mask"].sum(dim=1))
            batches.append(MicroBatch(inputs, token_count=token_count,
                                      loss_tokens=self._loss_units(mask, rows_here),
                                      row_lengths=lengths))
        return batches

    def _loss_units(self, mask, rows: int) -> int:
        loss_type = self._grpo.loss_type
        if loss_type == "dapo":
            return int(mask.sum())
        if loss_type == "grpo":
            return rows
        if loss_type == "dr_grpo":
            return rows * self._grpo.max_completion_length
        return 1  # bnpo: the micro-batch's token mean

    # The loss.

    def loss(self, model, batch: dict[str, Any], *, loss_weight: float):
        import torch

        mask = batch[COMPLETION_MASK]
        logits = self._completion_logits(model, batch)
        logps = selected_logps(logits, batch[COMPLETION_IDS])
        units = self._loss_units(mask, len(mask))
        result = grpo_loss(logps, batch.get(OLD_LOGPS), batch.get(REFERENCE_LOGPS),
                           batch[ADVANTAGES], mask, self._settings,
                           step_tokens=mask.sum() if self._grpo.loss_type == "dapo" else None)
        loss_sum = result.loss * units
        with torch.no_grad():
            entropy = masked_mean(token_entropy(logits.detach()), mask)
        figures = [result.clip_low, result.clip_high, entropy]
        if self._uses_reference:
            figures.append(result.kl)
        sums = torch.stack([loss_sum.detach(), *(value.detach() * units for value in figures)])
        return loss_sum * loss_weight, sums.double()

    def _completion_logits(self, model, batch: dict[str, Any]):
        """[rows, completion width, vocab]: the logits that predict each completion token,
        at the sampling temperature (the log-probs are those of what was sampled)."""
        width = batch[COMPLETION_IDS].shape[1]
        inputs = {name: tensor for name, tensor in batch.items() if name not in NOT_MODEL_INPUTS}
        logits = model(**inputs, logits_to_keep=width + 1).logits[:, :-1]
        return logits.float() / self._grpo.temperature

    def _completion_logps(self, model, batch: dict[str, Any]):
        return selected_logps(self._completion_logits(model, batch), batch[COMPLETION_IDS])

    def _reference_logps(self, batch: dict[str, Any]):
        import torch

        if self._adapter_off:
            return self._forward_only(lambda model: _with_adapter_off(
                model, lambda: self._completion_logps(model, batch)))
        with torch.no_grad():
            return self._completion_logps(self._reference_model, batch)

    # The step's figures from its round.

    def step_figures(self, step_batches: list[MicroBatch], *, step: int, context: RankContext,
                     step_seconds: float) -> dict[str, Any]:
        report = next(batch.rollout for batch in step_batches if batch.rollout is not None)
        figures = report.reduced(context)
        every = self._grpo.rollouts_every
        if every and context.is_main and (step % every == 0 or step == 1) \
                and self._telemetry is not None:
            self._telemetry.rollout(step=step, samples=report.samples)
        figures["training_seconds"] = max(
            0.0, step_seconds - figures["sampling_seconds"] - figures["scoring_seconds"])
        return figures


def _with_adapter_off(model, function):
    from trainer.objectives.dpo import adapter_disabled

    with adapter_disabled(model):
        return function()


class RolloutStream:
    """This rank's endless micro-batches under objective grpo: a round sampled when its
    first micro-batch is drawn, then each of its micro-batches `num_iterations` times over.
    `skip(micro_batches)` moves past a resumed run's trained steps without sampling."""

    def __init__(self, objective: GrpoObjective, rows, *, spec: JobSpec, pad_token_id: int,
                 context: RankContext):
        self._objective, self._rows, self._spec = objective, rows, spec
        self._pad_token_id, self._context = pad_token_id, context
        self._prompts_per_round = spec.micro_batch_size * spec.grad_accum \
            // spec.grpo.num_generations
        self._prompt_order = self._prompt_rounds()
        self._round_index = 0
        self._pending: list[MicroBatch] = []
        self.rounds: list[Round] = []  # the latest round, for the rollouts the job shows

    def __iter__(self) -> Iterator[MicroBatch]:
        return self

    def __next__(self) -> MicroBatch:
        if not self._pending:
            self._pending = self._next_round()
        return self._pending.pop(0)

    def skip(self, micro_batches: int) -> None:
        """Move past `micro_batches` already trained: whole rounds unsampled, and a round
        left partway (num_iterations > 1) sampled again with the policy as resumed."""
        per_round = self._spec.grad_accum * self._spec.grpo.num_iterations
        whole, rest = divmod(micro_batches, per_round)
        for _ in range(whole):
            next(self._prompt_order)
            self._round_index += 1
        for _ in range(rest):
            next(self)

    def _next_round(self) -> list[MicroBatch]:
        objective = self._objective
        sampled = objective.sample_round(next(self._prompt_order), self._rows,
                                         pad_token_id=self._pad_token_id, context=self._context,
                                         round_index=self._round_index)
        self._round_index += 1
        self.rounds = [sampled]
        batches = objective.round_micro_batches(sampled, context=self._context,
                                                pad_token_id=self._pad_token_id)
        iterations = []
        for iteration in range(self._spec.grpo.num_iterations):
            report = sampled.report if iteration == 0 else sampled.report.reused()
            # The round's figures ride on each step's first micro-batch.
            iterations += [batch._replace(rollout=report if position == 0 else None)
                           for position, batch in enumerate(batches)]
        return iterations

    def _prompt_rounds(self) -> Iterator[list[int]]:
        """This rank's prompts a round at a time, epoch after epoch (one seeded shuffle all
        ranks share, dealt out as sft deals its rows)."""
        epoch, count = 0, self._prompts_per_round
        while True:
            order = rank_shard_order(len(self._rows), seed=self._spec.seed, epoch=epoch,
                                     rank=self._context.rank,
                                     world_size=self._context.world_size)
            for start in range(0, len(order) - count + 1, count):
                yield order[start:start + count]
            epoch += 1


@dataclass
class Round:
    """One round of this rank's samples: the prompts (left-padded) with their completions
    (cut after the end of turn), each completion's advantage, and what the job shows."""

    prompt_ids: Any  # [rows, prompt width], left-padded
    prompt_mask: Any
    completion_ids: Any  # [rows, max_completion_length at most]
    completion_mask: Any
    advantages: Any  # [rows]
    report: "RoundReport"
    prompts: list[str]
    completions: list[str]
    rewards: list[float]


@dataclass
class RoundReport:
    """A round's figures on this rank, as sums every rank's are added to (`reduced`)."""

    reward_sum: float
    reward_squares: float
    completions: int
    each_reward_sums: dict[str, float]
    flat_groups: int
    groups: int
    length_sum: float
    length_min: float
    length_max: float
    truncated: int
    sampling_seconds: float
    scoring_seconds: float
    # This rank's first prompts with all their completions and rewards (`rollout_samples`).
    samples: list[dict] = field(default_factory=list)

    @classmethod
    def of(cls, rewards, each: dict[str, list[float]], labels: list[str], std_is_zero,
           num_generations: int, lengths, truncated, *, sampling_seconds: float,
           scoring_seconds: float, samples: list[dict] = ()) -> "RoundReport":
        return cls(reward_sum=float(rewards.double().sum()),
                   reward_squares=float(rewards.double().square().sum()),
                   completions=len(rewards),
                   each_reward_sums={label: float(sum(each[label])) for label in labels},
                   flat_groups=int(std_is_zero.view(-1, num_generations)[:, 0].sum()),
                   groups=len(rewards) // num_generations,
                   length_sum=float(lengths.sum()), length_min=float(lengths.min()),
                   length_max=float(lengths.max()), truncated=int(truncated.sum()),
                   sampling_seconds=sampling_seconds, scoring_seconds=scoring_seconds,
                   samples=list(samples))

    def reused(self) -> "RoundReport":
        """The same round trained on again (num_iterations > 1): nothing sampled or scored."""
        return RoundReport(**{**self.__dict__, "sampling_seconds": 0.0, "scoring_seconds": 0.0})

    def reduced(self, context: RankContext) -> dict[str, Any]:
        """The step's figures over every rank's round (TRL's names, less their prefixes):
        sums added, extremes and seconds the largest of any rank."""
        import torch
        import torch.distributed as dist

        labels = list(self.each_reward_sums)
        sums = torch.tensor([self.reward_sum, self.reward_squares, self.completions,
                             self.flat_groups, self.groups, self.length_sum, self.truncated,
                             *(self.each_reward_sums[label] for label in labels)],
                            dtype=torch.float64, device=context.device)
        largest = torch.tensor([self.length_max, -self.length_min, self.sampling_seconds,
                                self.scoring_seconds], dtype=torch.float64, device=context.device)
        dist.all_reduce(sums)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX)
        (reward_sum, squares, count, flat, groups, length_sum, truncated,
         *each) = sums.tolist()
        length_max, negative_min, sampling, scoring = largest.tolist()
        mean = reward_sum / count
        variance = max(0.0, squares - count * mean * mean) / max(count - 1, 1)
        return {"reward": mean, "reward_std": math.sqrt(variance),
                "frac_reward_zero_std": flat / groups,
                "reward_means": {label: total / count for label, total in zip(labels, each)},
                "completion_length": length_sum / count, "completion_length_min": -negative_min,
                "completion_length_max": length_max, "clipped_ratio": truncated / count,
                "sampling_seconds": sampling, "scoring_seconds": scoring}


# Pure helpers (tests/trainer/test_grpo_objective.py).

def prompt_room(spec: JobSpec) -> int:
    """The tokens a prompt may keep: seq_len less the longest completion."""
    return spec.seq_len - spec.grpo.max_completion_length


def tokenize_prompts(tokenizer, records: list[PromptRecord], *, room: int) -> list[TokenizedExample]:
    """Each prompt under the training template with its generation prompt (as "Try it"
    and the exported model prompt it), its start cut to `room` tokens: the end holds the
    question and the turn the model answers in."""
    from trainer.data.chat_format import render_chats

    texts = render_chats(tokenizer, [list(record.prompt_messages) for record in records],
                         add_generation_prompt=True)
    rows = []
    for ids in tokenizer(texts, add_special_tokens=False).input_ids:
        kept = ids[-room:]
        rows.append(TokenizedExample(input_ids=kept, labels=[IGNORE_INDEX] * len(kept)))
    return rows


def rollout_samples(records: list[PromptRecord], texts: list[str], totals: list[float],
                    each: dict[str, list[float]], num_generations: int,
                    prompts: int) -> list[dict]:
    """The first `prompts` groups as the job shows them: each prompt with all its
    completions, each completion's reward and each reward's own score."""
    samples = []
    for start in range(0, min(len(texts), prompts * num_generations), num_generations):
        group = range(start, start + num_generations)
        samples.append({"prompt": records[start].prompt_text, "completions": [
            {"text": texts[index], "reward": totals[index],
             "rewards": {label: scores[index] for label, scores in each.items()}}
            for index in group]})
    return samples


def generate_plainly(model, **arguments):
    """`model.generate(**arguments)` with the checkpoint's own generation_config set aside
    for the call: transformers fills what `arguments` leave unset from it (suppressed or
    forced tokens, beams, more sequences a prompt), and the completions must be the policy's
    plain samples, one a row."""
    from transformers import GenerationConfig

    owner = model.get_base_model() if hasattr(model, "get_base_model") else model
    kept = owner.generation_config
    owner.generation_config = GenerationConfig()
    try:
        return model.generate(**arguments)
    finally:
        owner.generation_config = kept


def without_dropout(model) -> int:
    """Every dropout layer of the model set to 0 (LoRA's among them); how many were not.
    The sampling policy's log-probs, the reference's and the loss's must be one function of
    the weights: with dropout in training mode only, a round's first ratio would not be 1
    and the KL at step 1 not 0 (TRL's `disable_dropout`)."""
    import torch

    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.p = 0.0
            changed += 1
    return changed


def step_reward_std(rewards, context: RankContext) -> float:
    """The standard deviation of the step's rewards over every rank (a collective: every
    rank samples every round)."""
    import torch
    import torch.distributed as dist

    sums = torch.tensor([float(rewards.double().sum()), float(rewards.double().square().sum()),
                         float(len(rewards))], dtype=torch.float64, device=context.device)
    if dist.is_initialized():
        dist.all_reduce(sums)
    total, squares, count = sums.tolist()
    mean = total / count
    return math.sqrt(max(0.0, squares - count * mean * mean) / max(count - 1, 1))


def round_seed(seed: int, round_index: int, rank: int) -> int:
    """A round's sampling seed: the same job, round and rank sample the same completions."""
    return (seed * 1_000_003 + round_index * 7_919 + rank) % (2**63 - 1)


def left_padded(rows: list[list[int]], pad_token_id: int):
    """(input_ids, attention_mask), left-padded: generation continues every row at its end."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[index, width - len(row):] = 1
    return ids, mask


def completion_masks(completion_ids, stop_ids: list[int]):
    """(mask, truncated): 1 for each token up to and including the first stop token; a
    completion with none was cut at max_completion_length."""
    import torch

    is_stop = torch.isin(completion_ids, torch.tensor(stop_ids, device=completion_ids.device))
    width = completion_ids.shape[1]
    positions = torch.arange(width, device=completion_ids.device).expand_as(completion_ids)
    first_stop = torch.where(is_stop, positions, torch.full_like(positions, width)).min(dim=1).values
    mask = (positions <= first_stop.unsqueeze(1)).long()
    return mask, ~is_stop.any(dim=1)


def trimmed_inputs(sampled: Round, rows: slice) -> dict[str, Any]:
    """Rows of a round as one micro-batch's inputs: left padding no row of them needs and
    completion columns past their longest are dropped. Positions count real tokens only,
    as generation counted them."""
    import torch

    prompt_mask = sampled.prompt_mask[rows]
    completion_mask = sampled.completion_mask[rows]
    first = int((prompt_mask.sum(dim=0) > 0).nonzero()[0])
    width = max(int(completion_mask.sum(dim=1).max()), 1)
    completion_ids = sampled.completion_ids[rows, :width]
    completion_mask = completion_mask[:, :width]
    input_ids = torch.cat([sampled.prompt_ids[rows, first:], completion_ids], dim=1)
    # Padding after a completion's end is attended to by nothing the loss covers.
    attention_mask = torch.cat([prompt_mask[:, first:], torch.ones_like(completion_ids)], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": position_ids, COMPLETION_IDS: completion_ids,
            COMPLETION_MASK: completion_mask, ADVANTAGES: sampled.advantages[rows]}


def selected_logps(logits, token_ids):
    """log p(token) of each sampled token, without a [rows, width, vocab] log-softmax kept."""
    import torch

    picked = torch.gather(logits, -1, token_ids.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits):
    """[rows, width]: the entropy of each position's distribution, a few rows at a time."""
    import torch

    parts = []
    for chunk in logits.split(ENTROPY_CHUNK_ROWS):
        logps = torch.log_softmax(chunk, dim=-1)
        parts.append(-(logps.exp() * logps).sum(dim=-1))
    return torch.cat(parts)


def masked_mean(values, mask):
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
