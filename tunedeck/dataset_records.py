"""Dataset records: the accepted shapes of a local .jsonl/.json file, read into one
`Example` (the conversation so far, and the answer to learn).

Pure (json only): the trainer builds its examples with it, and the worker checks a job's
file with it before any GPU is taken, so both say the same thing about a bad file.
"""
from __future__ import annotations

import json
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


def load_file_examples(source: str | Path, *, limit: int | None = None) -> list[Example]:
    """The examples of a local file (the first `limit` records when given); every error
    names the file and what was expected."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"dataset {path}: no such file; expected a local "
                                f"{' or '.join(DATASET_SUFFIXES)} file")
    records = list(islice(iter_records(path), limit))
    if not records:
        raise ValueError(f"dataset {path}: no records")
    return [example_from_record(record, index=i + 1, source=path) for i, record in enumerate(records)]


def iter_records(path: Path) -> Iterator[Any]:
    if path.suffix == ".json":
        records = _parse_json(path.read_text(encoding="utf-8"), path, where="file")
        if not isinstance(records, list):
            raise ValueError(f"dataset {path}: expected a JSON list of records")
        yield from records
    elif path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if line.strip():
                    yield _parse_json(line, path, where=f"line {number}")
    else:
        raise ValueError(f"dataset {path}: unsupported file type {path.suffix!r}; "
                         f"expected {' or '.join(DATASET_SUFFIXES)}")


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
        return single_turn(prompt, str(record["output"]))
    if "prompt" in record and "response" in record:
        return single_turn(str(record["prompt"]), str(record["response"]))
    raise ValueError(f"dataset {source}: record {index} has keys {sorted(record)}; "
                     f"expected {EXPECTED_COLUMNS}")


def single_turn(prompt: str, response: str) -> Example:
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


