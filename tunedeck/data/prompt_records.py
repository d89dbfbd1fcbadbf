"""Prompt records (objective grpo): a prompt the model completes, with the columns its
rewards read, in the layouts people have, each read into one `PromptRecord`.

    {"prompt": "...", "answer": "..."}                      a prompt, and what rewards read
    {"prompt": [{role, content}, ...], ...}                 a chat to continue
    {"messages": [...], ...}                                a chat; a closing assistant turn
                                                            (a reference answer) is left out
    {"question": "...", ...}, {"problem": ...}, {"instruction": ..., "input": ...}

`columns.prompt` or `columns.messages` names a prompt column called otherwise, and
`columns.system` a system prompt's. A record without a prompt, or without a column a reward
reads, is refused by name with its number (from 1). Pure (as records.py): the worker's input
check, the data preflight and the trainer read prompts with it, so all say the same thing
about a bad record; `prompt_columns_problem` says it of data whose column names are known
before its rows (a .parquet schema, a .csv header).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from tunedeck.spec.sections import ColumnMapping

# Unmapped, the first of these a record has is its prompt ("messages" is a chat).
PROMPT_COLUMNS = ("prompt", "messages", "question", "problem", "instruction", "query")
EXPECTED = "a prompt (prompt, messages, question, problem or instruction)"


@dataclass(frozen=True)
class PromptRecord:
    prompt_messages: tuple[dict[str, str], ...]
    # The values of the columns the rewards read (tunedeck/rewards/scorers.py), by name.
    columns: Mapping[str, Any]

    @property
    def prompt_text(self) -> str:
        """The last user turn: what a rollout table shows as the prompt."""
        return next((message["content"] for message in reversed(self.prompt_messages)
                     if message["role"] == "user"), self.prompt_messages[-1]["content"])


def reward_readers(spec) -> tuple[tuple[str, str], ...]:
    """objective grpo: (column, "grpo.rewards[i] (name)") for each column a reward reads."""
    if spec.objective != "grpo":
        return ()
    readers: dict[str, str] = {}
    for index, reward in enumerate(spec.grpo.rewards):
        for column in sorted(reward.columns):
            readers.setdefault(column, f"grpo.rewards[{index}] ({reward.name})")
    return tuple(readers.items())


def prompt_columns_problem(column_names: Iterable[str], columns: ColumnMapping | None, *,
                           reward_columns: Mapping[str, str] | None = None) -> str | None:
    """Why rows with these columns cannot become prompts (a mapped column missing, no
    prompt column, a column a reward reads missing), naming the columns they have; None
    when they may. `reward_columns`: each column a reward reads, and that reward's words."""
    names = set(column_names)
    mapped = {f"columns.{role}": getattr(columns, role) for role in ("prompt", "messages", "system")
              if columns is not None and getattr(columns, role)}
    for role, name in mapped.items():
        if name not in names:
            return f"no column {name!r} ({role}); its columns are {sorted(names)}"
    has_prompt = any(role in mapped for role in ("columns.prompt", "columns.messages")) \
        or any(name in names for name in PROMPT_COLUMNS)
    if not has_prompt:
        return (f"its columns are {sorted(names)}: objective grpo reads {EXPECTED}; name "
                "yours with columns (e.g. columns: {prompt: query})")
    for name, reader in (reward_columns or {}).items():
        if name not in names:
            return (f"no column {name!r}, which {reader} reads; its columns are "
                    f"{sorted(names)}: set the reward's column to one of them")
    return None


def prompts_from_records(records: Iterable[Any], *, source: str, field: str = "dataset",
                         columns: ColumnMapping | None = None,
                         reward_columns: Mapping[str, str] | None = None) -> list[PromptRecord]:
    where = f"{field} {source}"
    prompts = [prompt_from_record(record, index=index, where=where, columns=columns,
                                  reward_columns=reward_columns or {})
               for index, record in enumerate(records, 1)]
    if not prompts:
        raise ValueError(f"{where}: no records")
    return prompts


def prompt_from_record(record: Any, *, index: int, where: str, columns: ColumnMapping | None,
                       reward_columns: Mapping[str, str]) -> PromptRecord:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: record {index} is a {type(record).__name__}; expected an "
                         f"object with {EXPECTED}")
    messages = _prompt_messages(record, columns, index=index, where=where)
    if columns is not None and columns.system:
        messages = _with_system(messages, _column(record, columns.system, "columns.system",
                                                  index=index, where=where))
    values = {}
    for name, reader in reward_columns.items():
        if name not in record:
            raise ValueError(f"{where}: record {index} has no column {name!r}, which {reader} "
                             f"reads; its columns are {sorted(record)}")
        values[name] = record[name]
    return PromptRecord(messages, values)


def _prompt_messages(record: dict, columns: ColumnMapping | None, *, index: int,
                     where: str) -> tuple[dict[str, str], ...]:
    if columns is not None and columns.messages:
        return _chat(_column(record, columns.messages, "columns.messages", index=index,
                             where=where), index=index, where=where)
    if columns is not None and columns.prompt:
        return _text_or_chat(_column(record, columns.prompt, "columns.prompt", index=index,
                                     where=where), index=index, where=where)
    if "prompt" in record:
        return _text_or_chat(record["prompt"], index=index, where=where)
    if "messages" in record:
        return _chat(record["messages"], index=index, where=where)
    for name in ("question", "problem", "query"):
        if name in record:
            return _text_or_chat(record[name], index=index, where=where)
    if "instruction" in record:
        text = str(record["instruction"])
        if record.get("input"):
            text = f"{text}\n\n{record['input']}"
        return _text_or_chat(text, index=index, where=where)
    raise ValueError(f"{where}: record {index} has keys {sorted(record)}; expected {EXPECTED}, "
                     "or name the prompt's column with columns.prompt")


def _text_or_chat(value: Any, *, index: int, where: str) -> tuple[dict[str, str], ...]:
    if isinstance(value, list):
        return _chat(value, index=index, where=where)
    text = "" if value is None else str(value)
    if not text.strip():
        raise ValueError(f"{where}: record {index} has an empty prompt")
    return ({"role": "user", "content": text},)


def _chat(value: Any, *, index: int, where: str) -> tuple[dict[str, str], ...]:
    """The turns to continue: a chat ending with an assistant turn (its reference answer)
    loses that turn."""
    well_formed = isinstance(value, list) and value and all(
        isinstance(turn, dict) and "role" in turn and "content" in turn for turn in value)
    if not well_formed:
        raise ValueError(f"{where}: record {index} prompt messages must be a non-empty list of "
                         "{role, content} objects")
    turns = [{"role": str(turn["role"]), "content": str(turn["content"])} for turn in value]
    if turns[-1]["role"] == "assistant":
        turns = turns[:-1]
    if not any(turn["role"] == "user" for turn in turns):
        raise ValueError(f"{where}: record {index} prompt messages have no user turn to answer")
    return tuple(turns)


def _column(record: dict, name: str, role: str, *, index: int, where: str) -> Any:
    if name not in record:
        raise ValueError(f"{where}: record {index} has no column {name!r} ({role}); its "
                         f"columns are {sorted(record)}")
    return record[name]


def _with_system(messages: tuple[dict[str, str], ...], system: Any) -> tuple[dict[str, str], ...]:
    """The system prompt first, unless empty or the chat opens with its own."""
    if not system or messages[0]["role"] == "system":
        return messages
    return ({"role": "system", "content": str(system)}, *messages)
