"""The dataset file formats the trainer reads, by how a file's name ends: the one list the
trainer's reader (tunedeck.data.sources), the web's upload and the form's file picker use.

Pure: the web imports it, which must not import the reader (it loads `datasets`)."""
from __future__ import annotations

# What tunedeck.data.records reads itself.
RECORD_FILE_SUFFIXES = (".jsonl", ".json", ".jsonl.gz")
# What the `datasets` library reads, with the builder it reads each with.
LIBRARY_FILE_FORMATS = {".parquet": "parquet", ".csv": "csv"}
DATASET_FILE_SUFFIXES = (*RECORD_FILE_SUFFIXES, *LIBRARY_FILE_FORMATS)


def dataset_file_suffix(name: str) -> str | None:
    """The dataset file suffix `name` ends with (".jsonl.gz", ".csv", ...), in lower case;
    None for a name the trainer does not read as a file."""
    lowered = name.lower()
    return next((suffix for suffix in sorted(DATASET_FILE_SUFFIXES, key=len, reverse=True)
                 if lowered.endswith(suffix)), None)
