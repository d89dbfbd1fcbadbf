"""Dataset records: the accepted shapes of a local .jsonl/.json file, read into one
`Example` (the conversation so far, and the answer to learn).

Pure (json only): the trainer builds its examples with it, and the worker checks a job's
file with it before any GPU is taken, so both say the same thing about a bad file (and about
an eval split that leaves too little on either side).

Errors start with the spec field that names the file (`dataset` or `eval_dataset`).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

EXPECTED_COLUMNS = "instruction/output, prompt/response or messages"
DATASET_SUFFIXES = (".jsonl", ".json")


@dataclass(frozen=True)
class Example:
    prompt_messages: tuple[dict[str, str], ...]
    response: str


def load_file_examples(source: str | Path, *, limit: int | None = None,
                       field: str = "dataset") -> list[Example]:
    """The examples of a local file (the first `limit` records when given); every error
    names the spec field, the file and what was expected."""
    path = _existing_file(source, field)
    records = list(islice(iter_records(path, field=field), limit))
    if not records:
        raise ValueError(f"{field} {path}: no records")
    return [example_from_record(record, index=i + 1, source=path, field=field)
            for i, record in enumerate(records)]


def count_file_records(source: str | Path, *, field: str = "dataset") -> int:
    """How many records the file holds, without checking their shape (a .jsonl file's
    non-blank lines are counted, not parsed)."""
    path = _existing_file(source, field)
    if path.suffix != ".jsonl":
        return sum(1 for _ in iter_records(path, field=field))
    with path.open("rb") as file:
        return sum(1 for line in file if line.strip())


def _existing_file(source: str | Path, field: str) -> Path:
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{field} {path}: no such file; expected a local "
                                f"{' or '.join(DATASET_SUFFIXES)} file")
    return path


def iter_records(path: Path, *, field: str = "dataset") -> Iterator[Any]:
    if path.suffix == ".json":
        records = _parse_json(path.read_text(encoding="utf-8"), path, where="file", field=field)
        if not isinstance(records, list):
            raise ValueError(f"{field} {path}: expected a JSON list of records")
        yield from records
    elif path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if line.strip():
                    yield _parse_json(line, path, where=f"line {number}", field=field)
    else:
        raise ValueError(f"{field} {path}: unsupported file type {path.suffix!r}; "
                         f"expected {' or '.join(DATASET_SUFFIXES)}")


def _parse_json(text: str, path: Path, *, where: str, field: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"{field} {path}: {where} is not valid JSON: {error}") from error


def example_from_record(record: Any, *, index: int, source: Path, field: str = "dataset") -> Example:
    """One record in any of the three accepted shapes; `index` counts from 1."""
    if not isinstance(record, dict):
        raise ValueError(f"{field} {source}: record {index} is a {type(record).__name__}; "
                         f"expected an object with {EXPECTED_COLUMNS}")
    if "messages" in record:
        return _chat_example(record["messages"], index=index, source=f"{field} {source}")
    if "instruction" in record and "output" in record:
        prompt = str(record["instruction"])
        if record.get("input"):
            prompt = f"{prompt}\n\n{record['input']}"
        return single_turn(prompt, str(record["output"]))
    if "prompt" in record and "response" in record:
        return single_turn(str(record["prompt"]), str(record["response"]))
    raise ValueError(f"{field} {source}: record {index} has keys {sorted(record)}; "
                     f"expected {EXPECTED_COLUMNS}")


def single_turn(prompt: str, response: str) -> Example:
    return Example(prompt_messages=({"role": "user", "content": prompt},), response=response)


def _chat_example(messages: Any, *, index: int, source: str) -> Example:
    """Train on the last assistant turn; everything before it is the prompt. `source` is
    the field and file, as error messages start."""
    well_formed = isinstance(messages, list) and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in messages)
    if not well_formed:
        raise ValueError(f"{source}: record {index} messages must be a list of "
                         "{role, content} objects")
    last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last_assistant is None:
        raise ValueError(f"{source}: record {index} messages have no assistant turn")
    prompt_messages = tuple({"role": m["role"], "content": str(m["content"])}
                            for m in messages[:last_assistant])
    return Example(prompt_messages=prompt_messages, response=str(messages[last_assistant]["content"]))




def held_out_count(example_count: int, fraction: float) -> int:
    """How many examples an eval split of `fraction` holds out (rounded half up)."""
    return int(example_count * fraction + 0.5)


def split_eval_examples(examples: list[Example], *, fraction: float,
                        seed: int) -> tuple[list[Example], list[Example]]:
    """(training, held out): a seeded choice of `held_out_count` examples, the same on every
    rank and every run of the seed; both keep the file's order."""
    chosen = list(range(len(examples)))
    # A string seed of its own, so the split is not the same permutation as an epoch shuffle.
    random.Random(f"eval-split-{seed}").shuffle(chosen)
    held_out = set(chosen[:held_out_count(len(examples), fraction)])
    return ([example for i, example in enumerate(examples) if i not in held_out],
            [example for i, example in enumerate(examples) if i in held_out])


def eval_split_problem(example_count: int, *, fraction: float, micro_batch_size: int,
                       ranks: int) -> str | None:
    """Why an eval split of `fraction` cannot work on `example_count` examples, or None:
    it must hold out at least one and leave a micro-batch for every rank."""
    if fraction <= 0:
        return None
    held_out = held_out_count(example_count, fraction)
    if held_out == 0:
        return (f"eval_split {fraction}: holds out none of the {example_count} examples; "
                "raise eval_split or set eval_dataset")
    needed = micro_batch_size * ranks
    if example_count - held_out < needed:
        return (f"eval_split {fraction}: leaves {example_count - held_out} of {example_count} "
                f"examples to train on; need at least micro_batch_size x ranks = {needed}")
    return None
