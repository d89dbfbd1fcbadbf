"""Where a dataset's records come from: the spec's `dataset` or `eval_dataset`, read into
Examples by one function (`load_source_examples`), or into preference pairs (objective dpo)
by its twin (`load_source_pairs`), that the trainer and the worker's input check both call,
so both say the same thing about a bad dataset. Both read the same rows the same way.

A local .jsonl, .json or .jsonl.gz file is read by tunedeck.data.records itself. Through
the `datasets` library, on the worker host only: a .parquet or .csv file, a folder (written
by `save_to_disk`, or a dataset repository's files as the Hub lays them out), or a Hugging
Face id (`org/name`, with `dataset_config` and `dataset_split`). Online an id is fetched as
`datasets` fetches it; with HF_HUB_OFFLINE=1 it is read from the Hub cache's snapshot (what
`hf download --repo-type dataset` leaves), else from what `datasets` prepared before, since
`datasets` itself looks only at the latter when offline.

Imports `datasets` in function bodies only: the web imports this module's neighbours, never
the library. Errors start with the spec field and the reference.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunedeck.data.file_formats import LIBRARY_FILE_FORMATS
from tunedeck.data.input_paths import HUB_ID_PATTERN, is_local_reference
from tunedeck.data.preference_records import (PREFERENCE_COLUMNS, PreferencePair, mapped_pairs,
                                              preference_columns_problem)
from tunedeck.data.prompt_records import (PROMPT_COLUMNS, PromptRecord, prompt_columns_problem,
                                          prompts_from_records, reward_readers)
from tunedeck.data.records import (NO_COLUMNS, Example, columns_problem, count_file_records,
                                   examples_from_records, is_record_file, load_file_examples,
                                   read_file_records)
from tunedeck.jobs.failure_kinds import offline_cache_advice
from tunedeck.spec.sections import ColumnMapping

# Files `save_to_disk` writes at the top of its folder (a Dataset's, a DatasetDict's).
SAVED_FOLDER_MARKERS = ("state.json", "dataset_dict.json")
ACCEPTED = ("a .jsonl, .json, .jsonl.gz, .parquet or .csv file, a dataset folder, or a "
            "Hugging Face dataset id (org/name)")
# The columns an unmapped record is read from (tunedeck.data.records); others stay unread.
SHAPE_COLUMNS = ("messages", "instruction", "input", "output", "prompt", "response")
# ... and an unmapped preference pair (tunedeck.data.preference_records).
PAIR_COLUMNS = PREFERENCE_COLUMNS


@dataclass(frozen=True)
class DatasetSource:
    reference: str
    field: str = "dataset"  # the spec field it came from, as errors name it
    config: str | None = None
    split: str = "train"
    columns: ColumnMapping | None = None
    cache_dir: Path | None = None  # the `datasets` cache; None: its own (HF_DATASETS_CACHE)
    # objective grpo: each column a reward reads, and that reward in words.
    reward_columns: tuple[tuple[str, str], ...] = ()

    @property
    def where(self) -> str:
        return f"{self.field} {self.reference}"

    @property
    def split_field(self) -> str:
        return "dataset_split" if self.field == "dataset" else f"{self.field}_split"


def spec_source(spec, field: str = "dataset", *, cache_dir: Path | None = None) -> DatasetSource:
    """The spec's `dataset` or `eval_dataset` (which is read with the same config and columns)."""
    split = spec.dataset_split if field == "dataset" else spec.eval_dataset_split
    return DatasetSource(getattr(spec, field), field=field, config=spec.dataset_config,
                         split=split, columns=spec.columns, cache_dir=cache_dir,
                         reward_columns=reward_readers(spec))




def load_source_examples(source: DatasetSource, *, limit: int | None = None) -> list[Example]:
    """The first `limit` (or all) examples; ValueError or OSError naming the field otherwise."""
    if is_record_file(source.reference):
        return load_file_examples(source.reference, limit=limit, field=source.field,
                                  columns=source.columns)
    rows = _library_rows(source, limit=limit, problem=columns_problem, shape=SHAPE_COLUMNS)
    return examples_from_records(rows, source=source.reference, field=source.field,
                                 columns=source.columns)


def load_source_pairs(source: DatasetSource, *, limit: int | None = None) -> list[PreferencePair]:
    """The first `limit` (or all) preference pairs, read as `load_source_examples` reads
    examples, in the ColumnMapping's prompt/chosen/rejected (and system); ValueError or
    OSError naming the field otherwise: data whose columns are known before its rows and
    hold no chosen/rejected is refused naming the columns it has."""
    if is_record_file(source.reference):
        path, records = read_file_records(source.reference, limit=limit, field=source.field)
        return mapped_pairs(records, source=str(path), field=source.field, columns=source.columns)
    rows = _library_rows(source, limit=limit, problem=preference_columns_problem,
                         shape=PAIR_COLUMNS)
    return mapped_pairs(rows, source=source.reference, field=source.field, columns=source.columns)


def load_source_prompts(source: DatasetSource, *, limit: int | None = None) -> list[PromptRecord]:
    """The first `limit` (or all) prompts of objective grpo, each with the columns its
    rewards read (`source.reward_columns`), read as `load_source_examples` reads examples;
    ValueError or OSError naming the field otherwise."""
    readers = dict(source.reward_columns)
    if is_record_file(source.reference):
        path, records = read_file_records(source.reference, limit=limit, field=source.field)
        return prompts_from_records(records, source=str(path), field=source.field,
                                    columns=source.columns, reward_columns=readers)
    rows = _library_rows(
        source, limit=limit,
        problem=lambda names, columns: prompt_columns_problem(names, columns,
                                                              reward_columns=readers),
        shape=(*PROMPT_COLUMNS, "input", *readers))
    return prompts_from_records(rows, source=source.reference, field=source.field,
                                columns=source.columns, reward_columns=readers)


def _library_rows(source: DatasetSource, *, limit: int | None, problem, shape) -> list[dict]:
    """The first `limit` rows the `datasets` library reads, with only the columns the spec
    maps and those of an unmapped record's `shape`; `problem(column_names, columns)` first."""
    dataset = open_library_dataset(source)
    refused = problem(dataset.column_names, source.columns)
    if refused:
        raise ValueError(f"{source.where}: {refused}")
    if limit is not None and limit < len(dataset):
        dataset = dataset.select(range(limit))
    dataset = dataset.select_columns(_read_columns(dataset.column_names, source.columns, shape))
    return dataset.to_list()


def count_source_records(source: DatasetSource) -> int:
    if is_record_file(source.reference):
        return count_file_records(source.reference, field=source.field)
    return len(open_library_dataset(source))


def _read_columns(names: list[str], columns: ColumnMapping | None,
                  shape: tuple[str, ...] = SHAPE_COLUMNS) -> list[str]:
    mapped = [name for name in (columns or NO_COLUMNS).model_dump().values() if name]
    return [name for name in names if name in mapped or name in shape]


def open_library_dataset(source: DatasetSource):
    """The `datasets.Dataset` of a file, folder or id that the library reads."""
    path = Path(source.reference).expanduser()
    suffix = path.suffix.lower()
    if path.is_dir():
        return _read(source, _load_folder, path)
    if is_local_reference(source.reference):
        if not path.is_file():
            raise FileNotFoundError(f"{source.where}: no such file or folder; expected {ACCEPTED}")
        if suffix not in LIBRARY_FILE_FORMATS:
            raise ValueError(f"{source.where}: unsupported file type {suffix!r}; expected {ACCEPTED}")
        return _read(source, _load_file, path, options="")
    if not HUB_ID_PATTERN.match(source.reference):
        raise ValueError(f"{source.where}: not a path nor a Hugging Face id; expected {ACCEPTED}")
    return _read(source, _load_hub_id)


def _read(source: DatasetSource, load, *arguments, options: str | None = None):
    """`load(source, ...)`, with the library's errors said as the field's (and, by default,
    with the config and split it was read with)."""
    try:
        from datasets.exceptions import DatasetsError
    except ImportError as error:  # a host without the worker extra
        raise ValueError(f"{source.where}: reading it needs the `datasets` library, which "
                         "this host lacks (pip install 'tunedeck[worker]')") from error

    if options is None:
        options = f" (dataset_config {source.config!r}, {source.split_field} {source.split!r})"
    try:
        return load(source, *arguments)
    except (ValueError, OSError, DatasetsError) as error:
        if str(error).startswith(source.where):
            raise
        raise ValueError(f"{source.where}{options}: {type(error).__name__}: {error}") from error


def _load_file(source: DatasetSource, path: Path):
    import datasets

    builder = LIBRARY_FILE_FORMATS[path.suffix.lower()]
    options: dict[str, Any] = {}
    if builder == "csv":
        # Every column as text: pandas would make "007" the number 7, and "" a NaN.
        header = _csv_header(path, source)
        options = {"features": datasets.Features({name: datasets.Value("string") for name in header}),
                   "na_filter": False}
    elif _parquet_rows(path) == 0:
        raise ValueError(f"{source.where}: no records")
    # A single file is one split, "train", read whole.
    return datasets.load_dataset(builder, data_files=str(path), split="train",
                                 cache_dir=_cache(source), **options)


def _csv_header(path: Path, source: DatasetSource) -> list[str]:
    with path.open(newline="", encoding="utf-8") as file:
        rows = csv.reader(file)
        header, first_row = next(rows, None), next(rows, None)
    if not header:
        raise ValueError(f"{source.where}: no header row; expected column names on the first line")
    if first_row is None:
        raise ValueError(f"{source.where}: no records")
    return header


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet

    return pyarrow.parquet.ParquetFile(path).metadata.num_rows


def _load_folder(source: DatasetSource, path: Path):
    import datasets

    if not any((path / marker).is_file() for marker in SAVED_FOLDER_MARKERS):
        if not any(entry.is_file() for entry in path.rglob("*")):
            raise ValueError(f"{source.where}: an empty folder; expected a folder written by "
                             "save_to_disk, or one of data files (.parquet, .csv, .jsonl, ...)")
        # A dataset repository's files (data/train-*.parquet, ...), as the Hub lays them out.
        return datasets.load_dataset(str(path), name=source.config, split=source.split,
                                     cache_dir=_cache(source))
    saved = datasets.load_from_disk(str(path))
    if not isinstance(saved, datasets.DatasetDict):
        return saved  # one Dataset: no splits to choose from
    return _select_split(saved, source)


def _select_split(saved, source: DatasetSource):
    """The split a saved DatasetDict's `split` names, slices and sums as `load_dataset` reads
    them ("train", "train[:10%]", "train[100:]+test"), by the library's own parser."""
    from datasets import concatenate_datasets
    from datasets.arrow_reader import ReadInstruction

    try:
        parts = ReadInstruction.from_spec(source.split).to_absolute(
            {name: len(split) for name, split in saved.items()})
    except (ValueError, AssertionError) as error:
        raise ValueError(f"{source.where}: {source.split_field} {source.split!r}: {error} "
                         f"(the folder's splits are {sorted(saved)})") from error
    chosen = [saved[part.splitname].select(range(part.from_, part.to)) for part in parts]
    return chosen[0] if len(chosen) == 1 else concatenate_datasets(chosen)


def _load_hub_id(source: DatasetSource):
    import datasets
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        return datasets.load_dataset(source.reference, name=source.config, split=source.split,
                                     cache_dir=_cache(source))
    snapshot = _cached_snapshot(source.reference)
    if snapshot is not None:
        return _load_folder(source, snapshot)
    try:  # what `datasets` prepared in its own cache, the only place it looks when offline
        return datasets.load_dataset(source.reference, name=source.config, split=source.split,
                                     cache_dir=_cache(source))
    except ConnectionError as error:
        raise FileNotFoundError(f"{source.where}: " + offline_cache_advice(
            source.reference, hub_cache=f"{constants.HF_HUB_CACHE}, nor prepared in the "
            "datasets cache", repo_type="dataset")) from error


def _cached_snapshot(repo_id: str) -> Path | None:
    """The Hub cache's folder of the dataset repository's main revision, if it holds one."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, repo_type="dataset", local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def _cache(source: DatasetSource) -> str | None:
    return str(source.cache_dir) if source.cache_dir is not None else None
