"""A dataset's column names, read cheaply for the New job form's column pickers.

The web process never loads the `datasets` library, so this reads only what is cheap: a
.jsonl or .jsonl.gz file's first record, a small .json file's first record, a .csv file's
header, a .parquet file's schema (through pyarrow, where it is installed: it comes with the
worker extra, not with the web image), and the `dataset_info.json` a `save_to_disk` folder
holds. Anything else (a Hugging Face id, a folder of data files) is None: its columns are
typed, and the worker checks them before the job takes a GPU. `guess_column_mapping` names
the likely prompt and response columns of a dataset that calls them otherwise.

Pure (json, csv and gzip only). Callers check the path against the allowed roots first.
"""
from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

from tunedeck.spec.sections import ColumnMapping
from tunedeck.units import MIB

MAX_JSON_BYTES = 16 * MIB  # a .json file is parsed whole; larger ones are not peeked
# Names datasets give the prompt and the response, most telling first; matched ignoring case.
LIKELY_PROMPT_COLUMNS = ("prompt", "question", "instruction", "input", "query", "problem",
                         "user", "human", "source", "context", "text")
LIKELY_RESPONSE_COLUMNS = ("response", "answer", "output", "completion", "solution", "target",
                           "assistant", "gpt", "reply", "label")
# The built-in datasets (trainer/data/builtin_dataset.py makes their records) and their
# columns, which say what each trains: examples, preference pairs (objective dpo), or
# prompts with the answer a reward checks (objective grpo).
BUILTIN_DATASET_COLUMNS = {"builtin:arithmetic": ("prompt", "response"),
                           "builtin:arithmetic-preference": ("prompt", "chosen", "rejected"),
                           "builtin:arithmetic-rl": ("prompt", "answer")}


def guess_column_mapping(names: list[str]) -> ColumnMapping | None:
    """The columns.prompt/response most likely meant among `names` (question/answer,
    instruction/output, input/output, ...), or None when no likely pair is there. The
    upload and the form's check both fill the column pickers with it."""
    prompt = _first_likely(names, LIKELY_PROMPT_COLUMNS)
    response = _first_likely(names, LIKELY_RESPONSE_COLUMNS, besides=prompt)
    if prompt is None or response is None:
        return None
    return ColumnMapping(prompt=prompt, response=response)


def _first_likely(names: list[str], likely: tuple[str, ...], *,
                  besides: str | None = None) -> str | None:
    by_lower = {name.lower(): name for name in reversed(names) if name != besides}
    return next((by_lower[word] for word in likely if word in by_lower), None)


def peek_columns(reference: str, *, split: str = "train") -> list[str] | None:
    """The column names of a local dataset file or saved folder, None when they cannot be
    read cheaply; OSError or ValueError for a file that cannot be read at all."""
    path = Path(reference).expanduser()
    name = path.name.lower()
    if path.is_dir():
        return _saved_folder_columns(path, split)
    if not path.is_file():
        return None
    if name.endswith((".jsonl", ".jsonl.gz")):
        return _first_line_columns(path)
    if name.endswith(".json"):
        return _json_columns(path)
    if name.endswith(".csv"):
        with path.open(newline="", encoding="utf-8") as file:
            return next(csv.reader(file), None)
    if name.endswith(".parquet"):
        return _parquet_columns(path)
    return None


def _first_line_columns(path: Path) -> list[str] | None:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        for line in file:
            if line.strip():
                return _record_keys(json.loads(line))
    return None


def _json_columns(path: Path) -> list[str] | None:
    if path.stat().st_size > MAX_JSON_BYTES:
        return None
    records = json.loads(path.read_text(encoding="utf-8"))
    return _record_keys(records[0]) if isinstance(records, list) and records else None


def _record_keys(record) -> list[str] | None:
    return list(record) if isinstance(record, dict) else None


def _parquet_columns(path: Path) -> list[str] | None:
    try:
        import pyarrow.parquet
    except ImportError:
        return None
    return list(pyarrow.parquet.read_schema(path).names)


def _saved_folder_columns(path: Path, split: str) -> list[str] | None:
    """The features `save_to_disk` recorded: of the Dataset, or of the DatasetDict's split."""
    if (path / "dataset_dict.json").is_file():
        path = path / split.split("+")[0].split("[")[0]  # "train[:10%]+test" reads train's
    info = path / "dataset_info.json"
    if not info.is_file():
        return None
    features = json.loads(info.read_text(encoding="utf-8")).get("features")
    return list(features) if isinstance(features, dict) else None
