"""Dataset records: the accepted shapes of a record (a local .jsonl/.json/.jsonl.gz file's,
or a row the `datasets` library read), each read into one `Example` (the conversation so
far, and the answer to learn), with the spec's `columns` naming columns called otherwise.

Pure (json and gzip only): the trainer builds its examples with it, and the worker checks a
job's data with it before any GPU is taken, so both say the same thing about a bad file (and
about an eval split that leaves too little on either side).

Errors start with the spec field that names the file (`dataset` or `eval_dataset`).
"""
from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from tunedeck.data.columns import BUILTIN_DATASET_COLUMNS, guess_column_mapping
from tunedeck.data.file_formats import RECORD_FILE_SUFFIXES  # what this module reads itself
from tunedeck.data.preference_records import PREFERENCE_COLUMNS, preference_columns_problem
from tunedeck.data.prompt_records import prompt_columns_problem
from tunedeck.spec.sections import ColumnMapping

EXPECTED_COLUMNS = "instruction/output, prompt/response or messages"
NO_COLUMNS = ColumnMapping()  # the usual names; one instance, not one per record


@dataclass(frozen=True)
class Example:
    prompt_messages: tuple[dict[str, str], ...]
    response: str


def load_file_examples(source: str | Path, *, limit: int | None = None,
                       field: str = "dataset", columns: ColumnMapping | None = None) -> list[Example]:
    """The examples of a local file (the first `limit` records when given); every error
    names the spec field, the file and what was expected."""
    path, records = read_file_records(source, limit=limit, field=field)
    return examples_from_records(records, source=path, field=field, columns=columns)


def read_file_records(source: str | Path, *, limit: int | None = None,
                      field: str = "dataset") -> tuple[Path, list[Any]]:
    """(the file's path, its first `limit` (or all) records, unchecked): the rows that
    examples, or preference pairs (tunedeck.data.preference_records), are read from."""
    path = _existing_file(source, field)
    return path, list(islice(iter_records(path, field=field), limit))


def examples_from_records(records: Iterable[Any], *, source: str | Path, field: str = "dataset",
                          columns: ColumnMapping | None = None) -> list[Example]:
    examples = [example_from_record(record, index=i + 1, source=source, field=field,
                                    columns=columns)
                for i, record in enumerate(records)]
    if not examples:
        raise ValueError(f"{field} {source}: no records")
    return examples


def count_file_records(source: str | Path, *, field: str = "dataset") -> int:
    """How many records the file holds, without checking their shape (a .jsonl file's
    non-blank lines are counted, not parsed)."""
    path = _existing_file(source, field)
    if path.suffix == ".json":
        return sum(1 for _ in iter_records(path, field=field))
    with _opener(path)(path, "rb") as file:
        return sum(1 for line in file if line.strip())


def is_record_file(source: str | Path) -> bool:
    return str(source).lower().endswith(RECORD_FILE_SUFFIXES)


def _opener(path: Path):
    """How to open a .jsonl file's lines: gzip's open for a .jsonl.gz one."""
    return gzip.open if path.name.lower().endswith(".gz") else open


def _existing_file(source: str | Path, field: str) -> Path:
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{field} {path}: no such file; expected a local "
                                f"{', '.join(RECORD_FILE_SUFFIXES)} file")
    return path


def iter_records(path: Path, *, field: str = "dataset") -> Iterator[Any]:
    if path.suffix == ".json":
        records = _parse_json(path.read_text(encoding="utf-8"), path, where="file", field=field)
        if not isinstance(records, list):
            raise ValueError(f"{field} {path}: expected a JSON list of records")
        yield from records
    elif path.name.lower().endswith((".jsonl", ".jsonl.gz")):
        with _opener(path)(path, "rt", encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if line.strip():
                    yield _parse_json(line, path, where=f"line {number}", field=field)
    else:
        raise ValueError(f"{field} {path}: unsupported file type {path.suffix!r}; "
                         f"expected {', '.join(RECORD_FILE_SUFFIXES)}")


def _parse_json(text: str, path: Path, *, where: str, field: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"{field} {path}: {where} is not valid JSON: {error}") from error


def example_from_record(record: Any, *, index: int, source: str | Path, field: str = "dataset",
                        columns: ColumnMapping | None = None) -> Example:
    """One record in any of the three accepted shapes, or in the shape `columns` names;
    `index` counts from 1."""
    if not isinstance(record, dict):
        raise ValueError(f"{field} {source}: record {index} is a {type(record).__name__}; "
                         f"expected an object with {EXPECTED_COLUMNS}")
    columns = columns or NO_COLUMNS
    where = f"{field} {source}"
    if columns.messages or columns.prompt or columns.response:
        example = _mapped_example(record, columns, index=index, where=where)
    else:
        example = _detected_example(record, index=index, where=where)
    if columns.system:
        return _with_system(example, _column(record, columns.system, "system", index=index, where=where))
    return example


def _detected_example(record: dict, *, index: int, where: str) -> Example:
    if "messages" in record:
        return _chat_example(record["messages"], index=index, source=where)
    if "instruction" in record and "output" in record:
        prompt = str(record["instruction"])
        if record.get("input"):
            prompt = f"{prompt}\n\n{record['input']}"
        return single_turn(prompt, str(record["output"]))
    if "prompt" in record and "response" in record:
        return single_turn(str(record["prompt"]), str(record["response"]))
    raise ValueError(f"{where}: record {index} has keys {sorted(record)}; "
                     f"expected {EXPECTED_COLUMNS}")


def _mapped_example(record: dict, columns: ColumnMapping, *, index: int, where: str) -> Example:
    if columns.messages:
        messages = _column(record, columns.messages, "messages", index=index, where=where)
        return _chat_example(messages, index=index, source=where)
    prompt = _column(record, columns.prompt or "prompt", "prompt", index=index, where=where)
    response = _column(record, columns.response or "response", "response", index=index, where=where)
    return single_turn(str(prompt), str(response))


def _column(record: dict, name: str, role: str, *, index: int, where: str) -> Any:
    if name not in record:
        raise ValueError(f"{where}: record {index} has no column {name!r} (columns.{role}); "
                         f"its columns are {sorted(record)}")
    return record[name]


def _with_system(example: Example, system: Any) -> Example:
    """The system prompt first, unless empty or the conversation opens with its own."""
    opens_with_system = example.prompt_messages and example.prompt_messages[0]["role"] == "system"
    if not system or opens_with_system:
        return example
    return Example(prompt_messages=({"role": "system", "content": str(system)},
                                    *example.prompt_messages), response=example.response)


def columns_problem(column_names: Iterable[str], columns: ColumnMapping | None, *,
                    objective: str = "sft",
                    reward_columns: dict[str, str] | None = None) -> str | None:
    """Why rows with these columns cannot become what `objective` trains on (sft: examples,
    when a mapped column is missing or no accepted shape fits; dpo: preference pairs,
    `preference_columns_problem`), or None; for data whose columns are known before its rows."""
    if objective == "dpo":
        return preference_columns_problem(column_names, columns)
    if objective == "grpo":
        return prompt_columns_problem(column_names, columns, reward_columns=reward_columns)
    names = set(column_names)
    columns = columns or NO_COLUMNS
    mapped = {f"columns.{role}": name for role, name in columns.model_dump().items() if name}
    if columns.prompt or columns.response:
        mapped.setdefault("columns.prompt", "prompt")
        mapped.setdefault("columns.response", "response")
    for role, name in mapped.items():
        if name not in names:
            return f"no column {name!r} ({role}); its columns are {sorted(names)}"
    shaped = ("messages" in names or {"instruction", "output"} <= names
              or {"prompt", "response"} <= names)
    if columns.messages or columns.prompt or columns.response or shaped:
        return None
    if set(PREFERENCE_COLUMNS[1:]) <= names:
        return (f"its columns are {sorted(names)}: preference pairs (chosen/rejected), not "
                f"supervised examples ({EXPECTED_COLUMNS}); train on them with objective dpo")
    likely = guess_column_mapping(sorted(names))
    example = (f"likely columns: {{prompt: {likely.prompt}, response: {likely.response}}}"
               if likely else "e.g. columns: {prompt: question, response: answer}")
    return f"its columns are {sorted(names)}: none of {EXPECTED_COLUMNS}; name yours with columns ({example})"


def builtin_dataset_problem(field: str, reference: str, *, objective: str = "sft",
                            reward_columns: dict[str, str] | None = None) -> str | None:
    """An unknown built-in dataset, or one whose records are not what `objective` trains on
    (its columns judged as a file's are, the spec's `columns` aside: a built-in's are its
    own), naming the built-in that is; None for one that fits. `reward_columns` (objective
    grpo): the columns the rewards read, each with the reward's words."""
    names = BUILTIN_DATASET_COLUMNS.get(reference)
    if names is None:
        return (f"{field} {reference}: unknown built-in dataset; expected one of "
                f"{', '.join(BUILTIN_DATASET_COLUMNS)}")
    if objective == "grpo" and reward_columns:
        problem = prompt_columns_problem(names, None, reward_columns=reward_columns)
        if problem and columns_problem(names, None, objective=objective) is None:
            return f"{field} {reference}: {problem}"
    if columns_problem(names, None, objective=objective) is None:
        return None
    fitting = [name for name, its_columns in BUILTIN_DATASET_COLUMNS.items()
               if columns_problem(its_columns, None, objective=objective) is None]
    return (f"{field} {reference}: its records are {_kind_of_records(names)}, and objective "
            f"{objective} trains on {BUILTIN_RECORD_KINDS[objective]}; use "
            f"{' or '.join(fitting)}")


BUILTIN_RECORD_KINDS = {"sft": "supervised examples", "dpo": "preference pairs",
                        "grpo": "prompts with answers"}


def _kind_of_records(names: Iterable[str]) -> str:
    kind = next(kind for objective, kind in BUILTIN_RECORD_KINDS.items()
                if columns_problem(names, None, objective=objective) is None)
    return f"{kind} ({'/'.join(names)})"


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
                       ranks: int, what: str = "examples") -> str | None:
    """Why an eval split of `fraction` cannot work on `example_count` examples (`what`:
    "pairs" for objective dpo, one a record as an example is), or None: it must hold out
    at least one and leave a micro-batch for every rank."""
    if fraction <= 0:
        return None
    held_out = held_out_count(example_count, fraction)
    if held_out == 0:
        return (f"eval_split {fraction}: holds out none of the {example_count} {what}; "
                "raise eval_split or set eval_dataset")
    needed = micro_batch_size * ranks
    if example_count - held_out < needed:
        return (f"eval_split {fraction}: leaves {example_count - held_out} of {example_count} "
                f"{what} to train on; need at least micro_batch_size x ranks = {needed}")
    return None
