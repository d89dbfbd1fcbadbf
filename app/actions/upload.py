"""Dataset uploads, one policy for `POST /api/datasets` and the New job form's upload.

A `DatasetUpload` is received into a temporary file in the uploader's own folder
(`TUNEDECK_HOME/uploads/NAME`), counting bytes: one that grows past the cap is refused
(TooLarge) as soon as it does, the partial file deleted. `keep()` then checks every record
against the accepted shapes (a bad file is Invalid, naming the file, and is deleted), keeps a
good one as `{sha256 prefix}-{NAME}` (its absolute path goes into a spec's `dataset`) and
audits it. Only the sanitized base name ever reaches the file system.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.actions.errors import Forbidden, Invalid, Location, TooLarge
from app.auth.principal import Principal
from tunedeck.accounts import audit
from tunedeck.accounts.users import USER_NAME_PATTERN
from tunedeck.data.records import DATASET_SUFFIXES, example_from_record, iter_records
from tunedeck.db.engine import Database
from tunedeck.settings import Settings
from tunedeck.units import MIB

UPLOAD_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
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
    records: int
    size_bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"dataset": str(self.path), "records": self.records, "bytes": self.size_bytes,
                "sha256": self.sha256}


def checked_filename(filename: str) -> str:
    """The plain name an upload is kept under; DatasetRefused naming `filename` otherwise."""
    suffix = Path(filename).suffix.lower()
    if not UPLOAD_FILENAME.match(filename) or suffix not in DATASET_SUFFIXES:
        raise DatasetRefused(
            f"filename {filename!r}: expected a plain file name (letters, digits, . _ -) "
            f"ending in {' or '.join(DATASET_SUFFIXES)}, e.g. train.jsonl", ("filename",))
    return filename


class DatasetUpload:
    """One upload being received, as a context manager: whatever was not kept when it
    closes is deleted. DatasetRefused for a bad file name, Forbidden for an account whose
    name cannot be a folder."""

    def __init__(self, principal: Principal, filename: str, *, settings: Settings):
        self.name = checked_filename(filename)
        if not PRINCIPAL_FOLDER.match(principal.name):
            raise Forbidden(NO_UPLOAD_FOLDER)
        self.principal, self.max_bytes = principal, settings.max_upload_bytes
        self.folder = settings.upload_dir_for(principal.name)
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(dir=self.folder, prefix=".upload-",
                                             suffix=Path(self.name).suffix)
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
        """Check every record, keep the file as `{sha256 prefix}-{name}` and audit it;
        DatasetRefused (the file deleted) otherwise."""
        self._file.close()
        digest = self._digest.hexdigest()
        records = _count_checked_records(self.temp_path, self.name)
        final_path = self.folder / f"{digest[:HASH_PREFIX_CHARS]}-{self.name}"
        self.temp_path.chmod(0o640)
        os.replace(self.temp_path, final_path)
        with database.transaction() as session:
            audit.record(session=session, actor=self.principal.name, action=audit.UPLOAD,
                         detail=f"{final_path.name} ({records} records, {self.size_bytes} bytes)",
                         client=client)
        return KeptDataset(final_path, records, self.size_bytes, digest)


def _count_checked_records(path: Path, name: str) -> int:
    """Every record in an accepted shape, or DatasetRefused naming the uploaded file."""
    count = 0
    try:
        for count, record in enumerate(iter_records(path), 1):
            example_from_record(record, index=count, source=path)
    except UnicodeDecodeError as error:
        raise DatasetRefused(
            f"dataset {name}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    except (ValueError, RecursionError) as error:
        raise DatasetRefused(str(error).replace(str(path), name)) from error
    if count == 0:
        raise DatasetRefused(f"dataset {name}: no records")
    return count


def too_large_message(max_bytes: int) -> str:
    return (f"upload larger than {max_bytes // MIB} MB "
            "(an admin changes the limit with TUNEDECK_MAX_UPLOAD_MB)")
