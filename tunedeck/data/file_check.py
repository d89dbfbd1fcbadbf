"""What the web checks of a dataset file it receives (an upload), cheaply and without the
`datasets` library: every record of a .jsonl, .json or .jsonl.gz file in a shape the trainer
reads, a .csv file's rows against its header, a .parquet file's schema and row count (where
pyarrow is installed: the worker extra brings it; without it the worker checks the file).

A file whose columns are not the usual ones (instruction/output, prompt/response, messages,
or a preference pair's prompt/chosen/rejected) passes, with the likely mapping guessed
(tunedeck.data.columns) or none: the user chooses the columns in the form's pickers, and the
worker checks them before the job takes a GPU. A file of preference pairs (for objective
dpo) has every record read as a pair (tunedeck.data.preference_records).

Pure (csv, json and gzip; pyarrow where installed). Errors (ValueError, OSError) start with
the field and the file, as tunedeck.data.records's do.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from tunedeck.data.columns import guess_column_mapping
from tunedeck.data.preference_records import pair_from_record, preference_columns_problem
from tunedeck.data.records import columns_problem, example_from_record, is_record_file, iter_records
from tunedeck.spec.sections import ColumnMapping


@dataclass(frozen=True)
class CheckedFile:
    records: int | None  # None: not counted here (a .parquet file on a host without pyarrow)
    columns: list[str] | None  # the first record's, the header's or the schema's
    usual_columns: bool = True  # False: the spec's `columns` must name the prompt and response
    guessed: ColumnMapping | None = None  # the likely columns, when not the usual ones

    @property
    def pairs(self) -> bool:
        """Preference pairs (chosen/rejected columns), not supervised examples."""
        return bool(self.columns) and columns_problem(self.columns, None) is not None \
            and preference_columns_problem(self.columns, None) is None


def check_dataset_file(path: Path, *, field: str = "dataset") -> CheckedFile:
    """The file's records and columns; ValueError naming `field` and the file when it holds
    no records or one the trainer cannot read."""
    suffix = path.suffix.lower()
    if is_record_file(path):
        return _checked_record_file(path, field)
    if suffix == ".csv":
        return _checked_csv(path, field)
    if suffix == ".parquet":
        return _checked_parquet(path, field)
    raise ValueError(f"{field} {path}: unsupported file type {suffix!r}")


def _checked_record_file(path: Path, field: str) -> CheckedFile:
    count, first = 0, None  # first: the first object record's CheckedFile
    pairs = False  # the first object record is a preference pair's
    for count, record in enumerate(iter_records(path, field=field), 1):
        if first is None and isinstance(record, dict):
            first = _with_columns(count, list(record))
            pairs = first.pairs
        mapping = first.guessed if first else None
        # Every record in a shape the trainer reads (in the guessed columns, where guessed);
        # records whose columns the user has yet to choose are checked to be objects only.
        if pairs and isinstance(record, dict):
            pair_from_record(record, index=count, where=f"{field} {path}")
        elif first is None or first.usual_columns or mapping or not isinstance(record, dict):
            example_from_record(record, index=count, source=path, field=field, columns=mapping)
    if count == 0 or first is None:
        raise ValueError(f"{field} {path}: no records")
    return _with_columns(count, first.columns or [])


def _checked_csv(path: Path, field: str) -> CheckedFile:
    count = 0
    with path.open(newline="", encoding="utf-8") as file:
        rows = csv.reader(file)
        header = next(rows, None)
        if not header:
            raise ValueError(f"{field} {path}: no header row; expected column names on the "
                             "first line")
        for row in rows:
            if not row:
                continue  # a blank line, which the trainer's reader skips too
            if len(row) != len(header):
                raise ValueError(f"{field} {path}: line {rows.line_num} has {len(row)} fields; "
                                 f"the header has {len(header)}")
            count += 1
    if count == 0:
        raise ValueError(f"{field} {path}: no records")
    return _with_columns(count, header)


def _checked_parquet(path: Path, field: str) -> CheckedFile:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        return CheckedFile(records=None, columns=None)
    try:
        parquet = pyarrow.parquet.ParquetFile(path)
    except pyarrow.ArrowException as error:
        raise ValueError(f"{field} {path}: not a Parquet file ({error})") from error
    if parquet.metadata.num_rows == 0:
        raise ValueError(f"{field} {path}: no records")
    return _with_columns(parquet.metadata.num_rows, list(parquet.schema_arrow.names))


def _with_columns(records: int, columns: list[str]) -> CheckedFile:
    if columns_problem(columns, None) is None or preference_columns_problem(columns, None) is None:
        return CheckedFile(records, columns)
    return CheckedFile(records, columns, usual_columns=False, guessed=guess_column_mapping(columns))
