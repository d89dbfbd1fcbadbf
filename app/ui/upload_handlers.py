"""The New job form's dataset upload: the file Gradio received, checked and kept by the same
rule as `POST /api/datasets` (app/actions/upload.py), its path put into the dataset field."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from app.actions.upload import PRINCIPAL_FOLDER, DatasetRefused, check_and_keep, checked_filename
from app.auth.job_access import record_action
from app.auth.principal import Principal
from tunedeck.accounts import audit
from tunedeck.settings import Settings

COPY_CHUNK_BYTES = 1024 * 1024


def upload_dataset_from_form(received: str | None, *, principal: Principal, settings: Settings,
                             database) -> tuple[str | None, str]:
    """(the dataset field's new value, or None to leave it; a message for the form)."""
    if not received:
        return None, ""
    received_path = Path(received)
    try:
        name = checked_filename(received_path.name)
        if not PRINCIPAL_FOLDER.match(principal.name):
            raise DatasetRefused("this account's name cannot hold uploads")
        if received_path.stat().st_size > settings.max_upload_bytes:  # Gradio caps it first
            raise DatasetRefused(f"dataset {name}: larger than {settings.max_upload_mb} MB")
        folder = settings.upload_dir_for(principal.name)
        folder.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=Path(name).suffix)
        temp_path = Path(temp_name)
        try:
            digest = _copy_with_digest(received_path, handle)
            kept, records = check_and_keep(temp_path, name, digest, folder)
        finally:
            temp_path.unlink(missing_ok=True)
    except DatasetRefused as refused:
        return None, f"Upload refused: {refused}"
    finally:
        received_path.unlink(missing_ok=True)  # Gradio's copy: ours is in the uploads folder
    record_action(database=database, principal=principal, action=audit.UPLOAD,
                  detail=f"{kept.name} ({records} records, {kept.stat().st_size} bytes)")
    return str(kept), f"Uploaded **{name}**: {records} records. The dataset field now names it."


def _copy_with_digest(source: Path, handle: int) -> str:
    digest = hashlib.sha256()
    with source.open("rb") as reader, os.fdopen(handle, "wb") as writer:
        while chunk := reader.read(COPY_CHUNK_BYTES):
            digest.update(chunk)
            writer.write(chunk)
    return digest.hexdigest()
