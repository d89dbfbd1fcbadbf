"""The New job form's dataset upload: the file Gradio received, checked and kept by the same
action as `POST /api/datasets` (app/actions/upload.py), its path put into the dataset field."""
from __future__ import annotations

from pathlib import Path

from app.actions.errors import ActionError, TooLarge
from app.actions.upload import DatasetUpload
from app.auth.principal import Principal
from tunedeck.settings import Settings
from tunedeck.units import MIB

COPY_CHUNK_BYTES = MIB


def upload_dataset_from_form(received: str | None, *, principal: Principal, settings: Settings,
                             database) -> tuple[str | None, str]:
    """(the dataset field's new value, or None to leave it; a message for the form)."""
    if not received:
        return None, ""
    received_path = Path(received)
    try:
        with DatasetUpload(principal, received_path.name, settings=settings) as upload:
            with received_path.open("rb") as reader:
                while chunk := reader.read(COPY_CHUNK_BYTES):
                    upload.write(chunk)
            kept = upload.keep(database=database)
    except TooLarge:  # Gradio caps it first
        return None, (f"Upload refused: dataset {received_path.name}: larger than "
                      f"{settings.max_upload_mb} MB")
    except ActionError as refused:
        return None, f"Upload refused: {refused}"
    finally:
        received_path.unlink(missing_ok=True)  # Gradio's copy: ours is in the uploads folder
    return str(kept.path), (f"Uploaded **{upload.name}**: {kept.records} records. The dataset "
                            "field now names it.")
