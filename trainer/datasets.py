"""Training examples: read records, render prompts, tokenize with masked labels, batch per rank.

Every source becomes the same `Example` (the conversation so far, and the answer to learn),
so one tokenizer path serves alpaca, prompt/response and chat records alike. The loss covers
only the answer: prompt and padding positions get the label IGNORE_INDEX.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tunedeck.dataset_records import Example, load_file_examples, single_turn

IGNORE_INDEX = -100  # the label value Hugging Face causal-LM losses skip
BUILTIN_DATASETS = ("arithmetic",)
# Used when a tokenizer has no chat template of its own (most base models).
PLAIN_PROMPT_TEMPLATE = "### Instruction:\n{prompt}\n\n### Response:\n"


@dataclass(frozen=True)
class TokenizedExample:
    input_ids: list[int]
    labels: list[int]


def load_examples(source: str) -> list[Example]:
    """`builtin:NAME` or a local .jsonl/.json file; errors name the source and the problem."""
    if source.startswith("builtin:"):
        return _builtin_examples(source.removeprefix("builtin:"))
    return load_file_examples(source)


def _builtin_examples(name: str) -> list[Example]:
    from trainer.builtin_dataset import arithmetic_pairs

    if name != "arithmetic":
        raise ValueError(f"dataset builtin:{name}: unknown; "
                         f"built-in datasets are {list(BUILTIN_DATASETS)}")
    return [single_turn(prompt, response) for prompt, response in arithmetic_pairs()]


def render_prompt(tokenizer, messages: tuple[dict[str, str], ...]) -> str:
    """The text before the answer: the chat template's generation prompt, or a plain one."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return PLAIN_PROMPT_TEMPLATE.format(prompt="\n\n".join(m["content"] for m in messages))


def tokenize_example(tokenizer, example: Example, seq_len: int) -> TokenizedExample:
    prompt_text = render_prompt(tokenizer, example.prompt_messages)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False).input_ids
    bos_id = tokenizer.bos_token_id
    if bos_id is not None and not prompt_text.startswith(tokenizer.bos_token):
        prompt_ids = [bos_id, *prompt_ids]
    # The answer ends with end-of-sequence so the model learns where to stop.
    response_ids = tokenizer(example.response, add_special_tokens=False).input_ids
    response_ids = [*response_ids, tokenizer.eos_token_id]
    input_ids = (prompt_ids + response_ids)[:seq_len]
    labels = ([IGNORE_INDEX] * len(prompt_ids) + response_ids)[:seq_len]
    return TokenizedExample(input_ids=input_ids, labels=labels)


def tokenize_examples(tokenizer, examples: list[Example], seq_len: int, *,
                      source: str) -> list[TokenizedExample]:
    """Tokenized examples that still hold answer tokens after truncation to `seq_len`."""
    tokenized = [tokenize_example(tokenizer, example, seq_len) for example in examples]
    kept = [item for item in tokenized if any(label != IGNORE_INDEX for label in item.labels)]
    if not kept:
        raise ValueError(f"dataset {source}: every prompt fills seq_len={seq_len}; "
                         "no answer tokens are left to train on")
    return kept


def collate(batch: list[TokenizedExample], pad_token_id: int) -> dict[str, Any]:
    """Right-pad to the longest example of this batch; padding is masked and unlabeled."""
    import torch

    longest = max(len(item.input_ids) for item in batch)
    input_ids, labels, attention_mask = [], [], []
    for item in batch:
        padding = longest - len(item.input_ids)
        input_ids.append(item.input_ids + [pad_token_id] * padding)
        labels.append(item.labels + [IGNORE_INDEX] * padding)
        attention_mask.append([1] * len(item.input_ids) + [0] * padding)
    return {
        "input_ids": torch.tensor(input_ids, dtype=torch.long),
        "labels": torch.tensor(labels, dtype=torch.long),
        "attention_mask": torch.tensor(attention_mask, dtype=torch.long),
    }


def rank_shard_order(example_count: int, *, seed: int, epoch: int, rank: int,
                     world_size: int) -> list[int]:
    """This rank's indices for one epoch: one seeded shuffle shared by all ranks, dealt out
    round-robin and cut to equal lengths so every rank runs the same number of steps."""
    order = list(range(example_count))
    random.Random(seed + epoch).shuffle(order)
    usable = example_count - example_count % world_size
    return order[rank:usable:world_size]


def micro_batches(examples: list[TokenizedExample], *, micro_batch_size: int, pad_token_id: int,
                  seed: int, rank: int, world_size: int) -> Iterator[dict[str, Any]]:
    """Endless micro-batches for this rank, epoch after epoch (the step count ends training)."""
    if len(examples) < micro_batch_size * world_size:
        raise ValueError(f"dataset has {len(examples)} usable examples; need at least "
                         f"micro_batch_size x ranks = {micro_batch_size * world_size}")
    epoch = 0
    while True:
        order = rank_shard_order(len(examples), seed=seed, epoch=epoch, rank=rank, world_size=world_size)
        for start in range(0, len(order) - micro_batch_size + 1, micro_batch_size):
            batch = [examples[i] for i in order[start:start + micro_batch_size]]
            yield collate(batch, pad_token_id)
        epoch += 1
