"""Dataset uploads, one policy for `POST /api/datasets` and the New job form's upload.

A file of any format the trainer reads may be uploaded (tunedeck.data.sources's list); its
name is made safe first (`safe_upload_name`: "My Data (v2).jsonl" is kept as
"My-Data-v2.jsonl"). A `DatasetUpload` is received into a temporary file in the uploader's own
folder (`TUNEDECK_HOME/uploads/NAME`), counting bytes: one that grows past the cap is refused
(TooLarge) as soon as it does, the partial file deleted. `keep()` then checks the file
(tunedeck.data.file_check: a bad file is Invalid, naming the file, and is deleted), keeps a
good one as `{sha256 prefix}-{NAME}` (its absolute path goes into a spec's `dataset`; the
same name again is the same bytes, never another file overwritten) and audits it. A file
whose columns are not the usual ones is kept, with the likely columns guessed, for the
spec's `columns` to name.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.actions.errors import Forbidden, Invalid, Location, TooLarge
from app.auth.principal import Principal
from tunedeck.accounts import audit
from tunedeck.accounts.users import USER_NAME_PATTERN
from tunedeck.data.file_check import CheckedFile, check_dataset_file
from tunedeck.data.file_formats import DATASET_FILE_SUFFIXES, dataset_file_suffix
from tunedeck.db.engine import Database
from tunedeck.settings import Settings
from tunedeck.units import MIB

UNSAFE_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME_CHARS = 100  # of the safe name, extension included
UNNAMED_STEM = "dataset"  # for a name with nothing safe before its extension
# The account name rule, checked again here because the name becomes a folder.
PRINCIPAL_FOLDER = USER_NAME_PATTERN
HASH_PREFIX_CHARS = 12
NO_UPLOAD_FOLDER = "this account's name cannot hold uploads"


class DatasetRefused(Invalid):
    """An uploaded file that is not a dataset TuneDeck accepts; the message names it. Its
    location is the file's name (("filename",)) or, by default, its content (())."""

    def __init__(self, message: str, location: Location = ()):
        super().__init__([(location, message)])


@dataclass(frozen=True)
class KeptDataset:
    path: Path
    size_bytes: int
    sha256: str
    checked: CheckedFile
    already_kept: bool = False  # the same bytes under the same name were uploaded before

    @property
    def records(self) -> int | None:
        return self.checked.records

    def to_json(self) -> dict[str, Any]:
        guessed = self.checked.guessed
        return {"dataset": str(self.path), "records": self.records, "bytes": self.size_bytes,
                "sha256": self.sha256, "columns": self.checked.columns,
                "usual_columns": self.checked.usual_columns,
                "guessed_columns": guessed.model_dump(exclude_none=True) if guessed else None,
                "already_kept": self.already_kept}


def safe_upload_name(filename: str) -> str:
    """The name an upload is kept under: its base name with every run of characters other
    than letters, digits, dot, dash and underscore made one "-" (accents dropped: "é" is
    "e"), no leading dot, and its dataset extension (".jsonl.gz", ".csv", ...) kept in lower
    case. DatasetRefused naming `filename` when it has no extension the trainer reads."""
    suffix = dataset_file_suffix(filename)
    if suffix is None:
        raise DatasetRefused(
            f"filename {filename!r}: expected a name ending in "
            f"{', '.join(DATASET_FILE_SUFFIXES)}, e.g. train.jsonl", ("filename",))
    base = re.split(r"[/\\]", filename[:len(filename) - len(suffix)])[-1]
    ascii_base = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode()
    stem = UNSAFE_NAME_CHARACTERS.sub("-", ascii_base).strip(".-_")
    return (stem or UNNAMED_STEM)[:MAX_NAME_CHARS - len(suffix)] + suffix


class DatasetUpload:
    """One upload being received, as a context manager: whatever was not kept when it
    closes is deleted. DatasetRefused for a bad file name, Forbidden for an account whose
    name cannot be a folder."""

    def __init__(self, principal: Principal, filename: str, *, settings: Settings):
        self.given_name, self.name = filename, safe_upload_name(filename)
        if not PRINCIPAL_FOLDER.match(principal.name):
            raise Forbidden(NO_UPLOAD_FOLDER)
        self.principal, self.max_bytes = principal, settings.max_upload_bytes
        self.folder = settings.upload_dir_for(principal.name)
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(dir=self.folder, prefix=".upload-",
                                             suffix=dataset_file_suffix(self.name))
        self.temp_path = Path(temp_name)
        self._file = os.fdopen(handle, "wb")
        self._digest = hashlib.sha256()
        self.size_bytes = 0

    def __enter__(self) -> DatasetUpload:
        return self

    def __exit__(self, *_exception) -> None:
        self._file.close()
        self.temp_path.unlink(missing_ok=True)

    def write(self, chunk: bytes) -> None:
        """The next bytes of the file; TooLarge as soon as they pass the cap."""
        self.size_bytes += len(chunk)
        if self.size_bytes > self.max_bytes:
            raise TooLarge(too_large_message(self.max_bytes))
        self._digest.update(chunk)
        self._file.write(chunk)

    def keep(self, *, database: Database, client: str | None = None) -> KeptDataset:
        """Check the file, keep it as `{sha256 prefix}-{name}` and audit it; DatasetRefused
        (the file deleted) otherwise."""
        self._file.close()
        digest = self._digest.hexdigest()
        checked = _checked_file(self.temp_path, self.name)
        final_path = self.folder / f"{digest[:HASH_PREFIX_CHARS]}-{self.name}"
        # The name holds the content's hash: one already there is this file, kept as it is.
        already_kept = final_path.exists()
        if not already_kept:
            self.temp_path.chmod(0o640)
            os.replace(self.temp_path, final_path)
        with database.transaction() as session:
            audit.record(session=session, actor=self.principal.name, action=audit.UPLOAD,
                         detail=f"{final_path.name} ({checked.records} records, "
                                f"{self.size_bytes} bytes)", client=client)
        return KeptDataset(final_path, self.size_bytes, digest, checked, already_kept)


def _checked_file(path: Path, name: str) -> CheckedFile:
    """The file's records and columns, or DatasetRefused naming the uploaded file."""
    try:
        return check_dataset_file(path)
    except UnicodeDecodeError as error:
        raise DatasetRefused(
            f"dataset {name}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    except (ValueError, OSError, EOFError, RecursionError) as error:
        # A gzip stream that is not one, or ends early, is an OSError or an EOFError.
        message = str(error).replace(str(path), name)
        if not message.startswith(f"dataset {name}"):
            message = f"dataset {name}: cannot be read ({type(error).__name__}: {message})"
        raise DatasetRefused(message) from error


def too_large_message(max_bytes: int) -> str:
    return (f"upload larger than {max_bytes // MIB} MB "
            "(an admin changes the limit with TUNEDECK_MAX_UPLOAD_MB)")
