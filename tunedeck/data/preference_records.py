"""Preference records: a prompt with a chosen and a rejected answer, in the layouts people
have, each read into one `PreferencePair`.

    {"prompt": "...", "chosen": "...", "rejected": "..."}                       strings
    {"chosen": [{role, content}, ...], "rejected": [...]}                       two chats
    {"prompt": "..." or [messages], "chosen": [assistant turn], "rejected": [...]}

Two chats share their prompt (every turn before the last assistant turn, as the binarized
feedback sets on the Hub lay them out); where they differ before it, the record is refused.
A side without text is refused by name, with the record's number (from 1), and so is a pair
whose prompt is empty. Pure (as records.py): the worker's input check, the data preflight
and the trainer read pairs with it, so all of them say the same thing about a bad record;
`preference_columns_problem` says, of data whose column names are known before its rows (a
.parquet schema, a .csv header, the web's cheap peek), that it holds no pairs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from tunedeck.spec.sections import ColumnMapping

PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
EXPECTED = "prompt/chosen/rejected, or chosen/rejected chats sharing their prompt"


@dataclass(frozen=True)
class PreferencePair:
    prompt_messages: tuple[dict[str, str], ...]
    chosen: str
    rejected: str

    @property
    def same_answers(self) -> bool:
        """Chosen equals rejected: the pair teaches nothing (the preflight counts them)."""
        return self.chosen == self.rejected


@dataclass(frozen=True)
class PreferenceColumns:
    """The columns holding each part (a dataset that names them otherwise maps them here)."""

    prompt: str = "prompt"
    chosen: str = "chosen"
    rejected: str = "rejected"


USUAL = PreferenceColumns()


def preference_columns(columns: ColumnMapping | None) -> PreferenceColumns:
    """The spec's columns.prompt/chosen/rejected, each one unset at its usual name."""
    if columns is None:
        return USUAL
    return PreferenceColumns(prompt=columns.prompt or USUAL.prompt,
                             chosen=columns.chosen or USUAL.chosen,
                             rejected=columns.rejected or USUAL.rejected)


def preference_columns_problem(column_names: Iterable[str],
                               columns: ColumnMapping | None) -> str | None:
    """Why rows with these columns cannot become pairs (no chosen or rejected column after
    the spec's mapping, or a mapped prompt or system column missing), naming the columns they
    do have; None when they may. An unmapped prompt column may be missing: chats carry it."""
    names = set(column_names)
    mapped = preference_columns(columns)
    wanted = [("chosen", mapped.chosen), ("rejected", mapped.rejected)]
    if columns is not None:
        wanted += [(role, getattr(columns, role)) for role in ("prompt", "system")
                   if getattr(columns, role)]
    missing = [(role, name) for role, name in wanted if name not in names]
    if not missing:
        return None
    said = [f"{name!r} (columns.{role})" for role, name in missing]
    said = f" {said[0]}" if len(said) == 1 else f"s {', '.join(said[:-1])} and {said[-1]}"
    unmapped = columns is None or not (columns.chosen or columns.rejected)
    fix = ("; name yours with columns (e.g. columns: {prompt: question, chosen: better, "
           "rejected: worse})" if unmapped else "")
    return (f"no column{said}; its columns are {sorted(names)}: objective dpo reads "
            f"preference pairs, {EXPECTED}{fix}")


def mapped_pairs(records: list[Any], *, source: str, field: str = "dataset",
                 columns: ColumnMapping | None = None) -> list[PreferencePair]:
    """The records as pairs in the spec's columns (`preference_columns`), with the text of
    columns.system, where mapped, as each pair's system prompt (as an example's: unless
    empty or the prompt opens with its own)."""
    pairs = pairs_from_records(records, source=source, field=field,
                               columns=preference_columns(columns))
    if columns is None or not columns.system:
        return pairs
    where = f"{field} {source}"
    for index, record in enumerate(records, 1):
        if columns.system not in record:
            raise ValueError(f"{where}: record {index} has no column {columns.system!r} "
                             f"(columns.system); its columns are {sorted(record)}")
    return [_with_system(pair, record[columns.system]) for pair, record in zip(pairs, records)]


def _with_system(pair: PreferencePair, system: Any) -> PreferencePair:
    opens_with_system = pair.prompt_messages and pair.prompt_messages[0]["role"] == "system"
    if not system or opens_with_system:
        return pair
    return replace(pair, prompt_messages=({"role": "system", "content": str(system)},
                                          *pair.prompt_messages))


def pairs_from_records(records: Iterable[Any], *, source: str, field: str = "dataset",
                       columns: PreferenceColumns = USUAL) -> list[PreferencePair]:
    pairs = [pair_from_record(record, index=i + 1, where=f"{field} {source}", columns=columns)
             for i, record in enumerate(records)]
    if not pairs:
        raise ValueError(f"{field} {source}: no records")
    return pairs


def pair_from_record(record: Any, *, index: int, where: str,
                     columns: PreferenceColumns = USUAL) -> PreferencePair:
    """One record as a pair; `where` is the spec field and the file, as errors start."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: record {index} is a {type(record).__name__}; expected an "
                         f"object with {EXPECTED}")
    missing = [name for name in (columns.chosen, columns.rejected) if name not in record]
    if missing:
        raise ValueError(f"{where}: record {index} has no column {missing[0]!r}; its columns "
                         f"are {sorted(record)}; expected {EXPECTED}")
    chosen, rejected = record[columns.chosen], record[columns.rejected]
    prompt = record.get(columns.prompt)
    chosen_prompt, chosen_text = _side(chosen, "chosen", index=index, where=where)
    rejected_prompt, rejected_text = _side(rejected, "rejected", index=index, where=where)
    if chosen_prompt != rejected_prompt:
        raise ValueError(f"{where}: record {index}: chosen and rejected differ before their "
                         "last assistant turn; a pair shares its prompt")
    if prompt is not None:
        prompt_messages = (*_prompt_messages(prompt, index=index, where=where), *chosen_prompt)
    elif chosen_prompt:
        prompt_messages = chosen_prompt
    else:
        raise ValueError(f"{where}: record {index} has no prompt: no column "
                         f"{columns.prompt!r}, and its answers are not chats with one")
    if not any(message["content"].strip() for message in prompt_messages):
        raise ValueError(f"{where}: record {index}: the prompt is empty")
    return PreferencePair(prompt_messages=prompt_messages, chosen=chosen_text,
                          rejected=rejected_text)


def _side(value: Any, name: str, *, index: int, where: str) -> tuple[tuple, str]:
    """(the turns before this side's answer, the answer's text)."""
    if isinstance(value, str):
        turns, text = (), value
    elif isinstance(value, list):
        messages = _messages(value, name, index=index, where=where)
        last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
        if last is None or last != len(messages) - 1:
            raise ValueError(f"{where}: record {index} {name} must end with an assistant turn")
        turns, text = tuple(messages[:last]), messages[last]["content"]
    else:
        raise ValueError(f"{where}: record {index} {name} is a {type(value).__name__}; "
                         "expected the answer's text or a chat ending with it")
    if not text.strip():
        raise ValueError(f"{where}: record {index}: {name} is empty")
    return turns, text


def _prompt_messages(prompt: Any, *, index: int, where: str) -> tuple[dict[str, str], ...]:
    if isinstance(prompt, str):
        return ({"role": "user", "content": prompt},)
    if isinstance(prompt, list):
        return tuple(_messages(prompt, "prompt", index=index, where=where))
    raise ValueError(f"{where}: record {index} prompt is a {type(prompt).__name__}; expected "
                     "text or a chat")


def _messages(value: list, name: str, *, index: int, where: str) -> list[dict[str, str]]:
    if not all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
        raise ValueError(f"{where}: record {index} {name} must be a list of "
                         "{role, content} objects")
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in value]
