"""Training examples: read records, render prompts, tokenize with masked labels, batch per rank.

Every source becomes the same `Example` (the conversation so far, and the answer to learn),
so one tokenizer path serves alpaca, prompt/response and chat records alike. The loss covers
only the answer: prompt and padding positions get the label IGNORE_INDEX.
"""
from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IGNORE_INDEX = -100  # the label value Hugging Face causal-LM losses skip
BUILTIN_DATASETS = ("arithmetic",)
EXPECTED_COLUMNS = "instruction/output, prompt/response or messages"
# Used when a tokenizer has no chat template of its own (most base models).
PLAIN_PROMPT_TEMPLATE = "### Instruction:\n{prompt}\n\n### Response:\n"


@dataclass(frozen=True)
class Example:
    prompt_messages: tuple[dict[str, str], ...]
    response: str


@dataclass(frozen=True)
class TokenizedExample:
    input_ids: list[int]
    labels: list[int]


def load_examples(source: str) -> list[Example]:
    """`builtin:NAME` or a local .jsonl/.json file; errors name the source and the problem."""
    if source.startswith("builtin:"):
        return _builtin_examples(source.removeprefix("builtin:"))
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"dataset {path}: no such file")
    records = read_records(path)
    if not records:
        raise ValueError(f"dataset {path}: no records")
    return [example_from_record(record, index=i + 1, source=path) for i, record in enumerate(records)]


def _builtin_examples(name: str) -> list[Example]:
    from trainer.builtin_dataset import arithmetic_pairs

    if name != "arithmetic":
        raise ValueError(f"dataset builtin:{name}: unknown; "
                         f"built-in datasets are {list(BUILTIN_DATASETS)}")
    return [_single_turn(prompt, response) for prompt, response in arithmetic_pairs()]


def read_records(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        records = _parse_json(text, path, where="file")
        if not isinstance(records, list):
            raise ValueError(f"dataset {path}: expected a JSON list of records")
        return records
    if path.suffix == ".jsonl":
        lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
        return [_parse_json(line, path, where=f"line {number}") for number, line in lines]
    raise ValueError(f"dataset {path}: unsupported file type {path.suffix!r}; use .jsonl or .json")


def _parse_json(text: str, path: Path, *, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"dataset {path}: {where} is not valid JSON: {error}") from error


def example_from_record(record: Any, *, index: int, source: Path) -> Example:
    """One record in any of the three accepted shapes; `index` counts from 1 for messages."""
    if not isinstance(record, dict):
        raise ValueError(f"dataset {source}: record {index} is a {type(record).__name__}; "
                         f"expected an object with {EXPECTED_COLUMNS}")
    if "messages" in record:
        return _chat_example(record["messages"], index=index, source=source)
    if "instruction" in record and "output" in record:
        prompt = str(record["instruction"])
        if record.get("input"):
            prompt = f"{prompt}\n\n{record['input']}"
        return _single_turn(prompt, str(record["output"]))
    if "prompt" in record and "response" in record:
        return _single_turn(str(record["prompt"]), str(record["response"]))
    raise ValueError(f"dataset {source}: record {index} has keys {sorted(record)}; "
                     f"expected {EXPECTED_COLUMNS}")


def _single_turn(prompt: str, response: str) -> Example:
    return Example(prompt_messages=({"role": "user", "content": prompt},), response=response)


def _chat_example(messages: Any, *, index: int, source: Path) -> Example:
    """Train on the last assistant turn; everything before it is the prompt."""
    well_formed = isinstance(messages, list) and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in messages)
    if not well_formed:
        raise ValueError(f"dataset {source}: record {index} messages must be a list of "
                         "{role, content} objects")
    last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last_assistant is None:
        raise ValueError(f"dataset {source}: record {index} messages have no assistant turn")
    prompt_messages = tuple({"role": m["role"], "content": str(m["content"])}
                            for m in messages[:last_assistant])
    return Example(prompt_messages=prompt_messages, response=str(messages[last_assistant]["content"]))


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
