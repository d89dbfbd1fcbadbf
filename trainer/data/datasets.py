"""Training examples: read records, render prompts, tokenize with masked labels, batch per rank.

Every source becomes the same `Example` (the conversation so far, and the answer to learn),
so one tokenizer path serves alpaca, prompt/response and chat records alike. The loss covers
only the answer: prompt and padding positions get the label IGNORE_INDEX.

Texts are rendered with the training chat template (trainer/data/chat_format.py: the tokenizer's
own, or a plain one, with beginning-of-sequence first), the one "Try it" and the exported
model use too. The answer is what the template writes after the generation prompt: the
response and the template's own end of turn (e.g. ChatML's `<|im_end|>`, the plain
template's end-of-sequence).
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from tunedeck.data.records import Example, single_turn
from tunedeck.data.sources import DatasetSource, load_source_examples, spec_source

from trainer.data.chat_format import render_chats
from trainer.token_loss import IGNORE_INDEX, loss_token_count

BUILTIN_DATASETS = ("arithmetic",)


@dataclass(frozen=True)
class TokenizedExample:
    """One example, or (with packing) one row of several. A packed row's positions restart
    at 0 for each example in it: that is how the model keeps them apart (trainer/data/packing.py)."""

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None


class MicroBatch(NamedTuple):
    inputs: dict[str, Any]  # the model's keyword arguments, labels included
    token_count: int  # tokens that are not padding (what throughput counts)
    loss_tokens: int  # answer tokens the loss covers (what the step's mean divides by)
    # Each row's tokens (an example, or a packed row), however the batch is laid out: what
    # a token attends over, for MFU's attention FLOPs (trainer/mfu.py).
    row_lengths: tuple[int, ...] = ()
    # objective grpo: the figures of the round of samples this step trains on, on the
    # step's first micro-batch (trainer/objectives/grpo.py).
    rollout: Any = None


def load_examples(source: str | DatasetSource, *, field: str = "dataset",
                  limit: int | None = None) -> list[Example]:
    """`builtin:NAME`, or any source tunedeck.data.sources reads (a local file or folder,
    a Hugging Face id; a DatasetSource carries its config, split and columns); errors name
    the spec field, the source and the problem."""
    if isinstance(source, str):
        source = DatasetSource(source, field=field)
    if source.reference.startswith("builtin:"):
        return _builtin_examples(source.reference.removeprefix("builtin:"), source.field)[:limit]
    return load_source_examples(source, limit=limit)


def load_spec_examples(spec, field: str = "dataset") -> list[Example]:
    """The examples of the spec's `dataset` or `eval_dataset`, with its config, split and
    columns (the `datasets` cache: HF_DATASETS_CACHE, which the worker sets for the ranks)."""
    return load_examples(spec_source(spec, field))


def _builtin_examples(name: str, field: str) -> list[Example]:
    from trainer.data.builtin_dataset import arithmetic_pairs

    if name != "arithmetic":
        raise ValueError(f"{field} builtin:{name}: unknown; "
                         f"built-in datasets are {list(BUILTIN_DATASETS)}")
    return [single_turn(prompt, response) for prompt, response in arithmetic_pairs()]


def render_prompt(tokenizer, messages: tuple[dict[str, str], ...]) -> str:
    """The text before the answer: the training chat template's generation prompt."""
    return render_chats(tokenizer, [list(messages)], add_generation_prompt=True)[0]


def render_conversation(tokenizer, example: Example, *, source: str = "dataset") -> tuple[str, str]:
    """(prompt text, answer text) under the training chat template: the prompt with the
    generation prompt, and what the template writes after it once the assistant's response
    is in the conversation. `source` (the spec field and file) names a template that does
    not render the full conversation as the prompt followed by the answer."""
    return render_conversations(tokenizer, [example], source=source)[0]


def render_conversations(tokenizer, examples: list[Example], *,
                         source: str = "dataset") -> list[tuple[str, str]]:
    """`render_conversation` of each example, rendered in two batched template calls (all
    prompts, then all conversations): per-call overhead was most of the rendering time."""
    if not examples:
        return []
    prompt_texts = render_chats(tokenizer, [list(example.prompt_messages) for example in examples],
                                add_generation_prompt=True)
    full_texts = render_chats(
        tokenizer, [[*example.prompt_messages, {"role": "assistant", "content": example.response}]
                    for example in examples], add_generation_prompt=False)
    return [(prompt_text, _answer_after(prompt_text, full_text, source=source))
            for prompt_text, full_text in zip(prompt_texts, full_texts)]


def _answer_after(prompt_text: str, full_text: str, *, source: str) -> str:
    if not full_text.startswith(prompt_text):
        raise ValueError(
            f"{source}: the tokenizer's chat template does not render the conversation as the "
            "prompt (with add_generation_prompt=True) followed by the answer, so the answer "
            f"tokens cannot be found; the prompt ends {prompt_text[-60:]!r}, the conversation "
            f"has {full_text[max(0, len(prompt_text) - 60):len(prompt_text)]!r} there")
    return full_text[len(prompt_text):]


def tokenize_all(tokenizer, examples: list[Example], seq_len: int | None, *,
                  source: str) -> list[TokenizedExample]:
    """Each example tokenized with masked labels. Texts are rendered and tokenized in
    batches (one tokenizer call for all prompts, one for all answers): the same ids as one
    call per text, in a third of the time, which a job pays on every rank at start-up.
    `seq_len` None leaves them whole (the data preflight measures what truncation cuts)."""
    # The template closes the turn itself (its end-of-turn token is part of the answer).
    texts = render_conversations(tokenizer, examples, source=source)
    if not texts:
        return []
    # Tokenized apart from the answer, as the prompt alone is tokenized at inference; without
    # special tokens, as apply_chat_template tokenizes: the template wrote them already.
    all_prompt_ids = tokenizer([prompt for prompt, _ in texts], add_special_tokens=False).input_ids
    all_answer_ids = tokenizer([answer for _, answer in texts], add_special_tokens=False).input_ids
    tokenized = []
    for prompt_ids, answer_ids in zip(all_prompt_ids, all_answer_ids):
        whole = TokenizedExample(input_ids=prompt_ids + answer_ids,
                                 labels=[IGNORE_INDEX] * len(prompt_ids) + answer_ids)
        tokenized.append(truncate_example(whole, seq_len))
    return tokenized


def prompt_token_ids(tokenizer, messages: tuple[dict[str, str], ...]) -> list[int]:
    """The ids a model is given to answer `messages`: the prompt exactly as training
    tokenized it, so a "Try it" prompt meets the model as its training examples did. They
    are also what `apply_chat_template(messages, add_generation_prompt=True)` gives on the
    exported model's tokenizer, which carries the training template."""
    return tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False).input_ids


def truncate_example(item: TokenizedExample, seq_len: int | None) -> TokenizedExample:
    """The first `seq_len` tokens (all with None): the answer, last, is what a long
    example loses."""
    if seq_len is None:
        return item
    return TokenizedExample(input_ids=item.input_ids[:seq_len], labels=item.labels[:seq_len])


def has_answer_tokens(item: TokenizedExample) -> bool:
    """Whether the loss covers any of its tokens (an example without is dropped)."""
    return any(label != IGNORE_INDEX for label in item.labels)


def tokenize_examples(tokenizer, examples: list[Example], seq_len: int, *,
                      source: str) -> list[TokenizedExample]:
    """Tokenized examples that still hold answer tokens after truncation to `seq_len`;
    `source` is how errors name the data ("dataset PATH", "eval_dataset PATH")."""
    tokenized = tokenize_all(tokenizer, examples, seq_len, source=source)
    kept = [item for item in tokenized if has_answer_tokens(item)]
    if not kept:
        raise ValueError(f"{source}: every prompt fills seq_len={seq_len}; "
                         "no answer tokens are left to train on")
    return kept


def collate(batch: list[TokenizedExample], pad_token_id: int) -> dict[str, Any]:
    """Right-pad to the longest row of this batch; padding is unlabeled and never attended
    to by real tokens. Plain rows carry an attention mask; packed rows carry position ids
    instead, because the model finds the example boundaries in them only without a mask.
    Their padding is one more run of positions from 0, so it stays a segment of its own."""
    import torch

    longest = max(len(item.input_ids) for item in batch)
    packed = batch[0].position_ids is not None
    input_ids, labels, attention_mask, position_ids = [], [], [], []
    for item in batch:
        padding = longest - len(item.input_ids)
        input_ids.append(item.input_ids + [pad_token_id] * padding)
        labels.append(item.labels + [IGNORE_INDEX] * padding)
        attention_mask.append([1] * len(item.input_ids) + [0] * padding)
        if packed:
            position_ids.append(item.position_ids + list(range(padding)))
    inputs = {"input_ids": torch.tensor(input_ids, dtype=torch.long),
              "labels": torch.tensor(labels, dtype=torch.long)}
    if packed:
        inputs["position_ids"] = torch.tensor(position_ids, dtype=torch.long)
    else:
        inputs["attention_mask"] = torch.tensor(attention_mask, dtype=torch.long)
    return inputs


def collate_padding_free(batch: list[TokenizedExample]) -> dict[str, Any]:
    """The micro-batch's rows laid end to end in one row: no padding at all. Position ids
    restart at 0 for every example (a packed row keeps its own), which is how the model
    keeps them apart (trainer/data/packing.py says how); no attention mask. Each row's first
    label is unlabeled, as the one-position shift leaves it in a padded batch, so the loss
    covers exactly the same tokens either way."""
    import torch

    input_ids, labels, position_ids = [], [], []
    for item in batch:
        input_ids += item.input_ids
        labels += [IGNORE_INDEX, *item.labels[1:]]
        position_ids += (item.position_ids if item.position_ids is not None
                         else range(len(item.input_ids)))
    return {"input_ids": torch.tensor([input_ids], dtype=torch.long),
            "labels": torch.tensor([labels], dtype=torch.long),
            "position_ids": torch.tensor([position_ids], dtype=torch.long)}


def collate_rows(batch: list[TokenizedExample], pad_token_id: int, *,
                 padding_free: bool = False) -> dict[str, Any]:
    """The spec's layout of a micro-batch: padded rows, or one padding-free row."""
    return collate_padding_free(batch) if padding_free else collate(batch, pad_token_id)


def rank_shard_order(example_count: int, *, seed: int, epoch: int, rank: int,
                     world_size: int) -> list[int]:
    """This rank's indices for one epoch: one seeded shuffle shared by all ranks, dealt out
    round-robin and cut to equal lengths so every rank runs the same number of steps."""
    order = list(range(example_count))
    random.Random(seed + epoch).shuffle(order)
    usable = example_count - example_count % world_size
    return order[rank:usable:world_size]


def micro_batches(examples: list[TokenizedExample], *, micro_batch_size: int, pad_token_id: int,
                  seed: int, rank: int, world_size: int,
                  padding_free: bool = False) -> Iterator[MicroBatch]:
    """Endless micro-batches for this rank, epoch after epoch (the step count ends training).
    `examples` are rows: examples, or packed rows of them; `padding_free` lays each
    micro-batch's rows end to end in one row (`collate_padding_free`)."""
    if len(examples) < micro_batch_size * world_size:
        raise ValueError(f"dataset has {len(examples)} usable rows (examples, or packed rows "
                         f"with packing on); need at least micro_batch_size x ranks = "
                         f"{micro_batch_size * world_size}")
    epoch = 0
    while True:
        order = rank_shard_order(len(examples), seed=seed, epoch=epoch, rank=rank, world_size=world_size)
        for start in range(0, len(order) - micro_batch_size + 1, micro_batch_size):
            batch = [examples[i] for i in order[start:start + micro_batch_size]]
            inputs = collate_rows(batch, pad_token_id, padding_free=padding_free)
            row_lengths = tuple(len(item.input_ids) for item in batch)
            yield MicroBatch(inputs, token_count=sum(row_lengths),
                             loss_tokens=loss_token_count(inputs["labels"]),
                             row_lengths=row_lengths)
        epoch += 1
