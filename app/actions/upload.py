"""Dataset uploads: `POST /api/datasets?filename=NAME.jsonl` with the file as the raw body.

The body is streamed to a temporary file in the uploader's own folder
(`TUNEDECK_HOME/uploads/NAME`), counting bytes: a declared Content-Length over the cap is a
413 before any byte is read, and a body that grows past the cap is a 413 as soon as it does
(the partial file deleted). Every record is then checked against the accepted shapes; a bad
file is a 422 naming the file, and is deleted. A good one is kept as
`{sha256 prefix}-{NAME}` and its absolute path goes into a spec's `dataset`.
Only the sanitized base name from the request ever reaches the file system.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from app.auth.job_access import record_action
from app.auth.principal import principal_of
from tunedeck.accounts.users import USER_NAME_PATTERN
from tunedeck.accounts import audit
from tunedeck.data.records import DATASET_SUFFIXES, example_from_record, iter_records

upload_router = APIRouter()

UPLOAD_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# The account name rule, checked again here because the name becomes a folder.
PRINCIPAL_FOLDER = USER_NAME_PATTERN
HASH_PREFIX_CHARS = 12


class UploadTooLarge(Exception):
    pass


class DatasetRefused(ValueError):
    """An uploaded file that is not a dataset TuneDeck accepts; the message names it."""


def check_and_keep(temp_path: Path, name: str, digest: str, folder: Path) -> tuple[Path, int]:
    """Check every record of an upload received into `temp_path` (in `folder`), then keep
    it as `{sha256 prefix}-{name}`: (its path, its record count). DatasetRefused otherwise.
    One rule for the REST upload and the New job form's."""
    records = _count_checked_records(temp_path, name)
    final_path = folder / f"{digest[:HASH_PREFIX_CHARS]}-{name}"
    temp_path.chmod(0o640)
    os.replace(temp_path, final_path)
    return final_path, records


def checked_filename(filename: str) -> str:
    """The plain name an upload is kept under; DatasetRefused naming `filename` otherwise."""
    suffix = Path(filename).suffix.lower()
    if not UPLOAD_FILENAME.match(filename) or suffix not in DATASET_SUFFIXES:
        raise DatasetRefused(
            f"filename {filename!r}: expected a plain file name (letters, digits, . _ -) "
            f"ending in {' or '.join(DATASET_SUFFIXES)}, e.g. train.jsonl")
    return filename


@upload_router.post("/api/datasets", status_code=201)
async def upload_dataset(request: Request,
                         filename: str = Query(..., max_length=200,
                                               description="the file's name, e.g. train.jsonl")
                         ) -> dict[str, Any]:
    """Store an uploaded .jsonl/.json dataset after checking its size, format and columns."""
    principal = principal_of(request)
    settings = request.app.state.settings
    name = _checked_filename(filename)
    max_bytes = settings.max_upload_bytes
    _refuse_declared_size(request, max_bytes)
    if not PRINCIPAL_FOLDER.match(principal.name):
        raise HTTPException(status_code=403, detail="this account's name cannot hold uploads")
    folder = settings.upload_dir_for(principal.name)
    folder.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=Path(name).suffix)
    temp_path = Path(temp_name)
    try:
        digest, size = await _receive_body(request, handle, max_bytes)
        final_path, records = await run_in_threadpool(check_and_keep, temp_path, name, digest,
                                                      folder)
    except DatasetRefused as refused:
        raise HTTPException(status_code=422, detail=[{
            "loc": ["body"], "type": "value_error", "msg": str(refused)}]) from refused
    except UploadTooLarge:
        raise HTTPException(status_code=413, detail=_too_large(max_bytes)) from None
    finally:
        temp_path.unlink(missing_ok=True)
    await run_in_threadpool(record_action, database=request.app.state.database,
                            principal=principal, action=audit.UPLOAD,
                            detail=f"{final_path.name} ({records} records, {size} bytes)",
                            client=request.client.host if request.client else None)
    return {"dataset": str(final_path), "records": records, "bytes": size, "sha256": digest}


def _checked_filename(filename: str) -> str:
    try:
        return checked_filename(filename)
    except DatasetRefused as refused:
        raise HTTPException(status_code=422, detail=[{
            "loc": ["query", "filename"], "type": "value_error", "msg": str(refused)}]) from refused


def _refuse_declared_size(request: Request, max_bytes: int) -> None:
    declared = request.headers.get("content-length")
    if declared is None:
        return  # a chunked body: counted as it arrives
    if not declared.isdigit():
        raise HTTPException(status_code=400, detail="Content-Length is not a number")
    if int(declared) > max_bytes:
        raise HTTPException(status_code=413, detail=_too_large(max_bytes))


async def _receive_body(request: Request, handle: int, max_bytes: int) -> tuple[str, int]:
    """Write the body to `handle` (closed afterwards): (its sha256, its size in bytes)."""
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(handle, "wb") as file:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise UploadTooLarge()
            digest.update(chunk)
            file.write(chunk)
    return digest.hexdigest(), size


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


def _too_large(max_bytes: int) -> str:
    return (f"upload larger than {max_bytes // (1024 * 1024)} MB "
            "(an admin changes the limit with TUNEDECK_MAX_UPLOAD_MB)")
