"""The New job form's dataset upload: the file Gradio received, checked and kept by the same
action as `POST /api/datasets` (app/actions/upload.py), its path put into the dataset field
and, for a file whose columns are not the usual ones, the likely columns into the pickers."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.actions.errors import ActionError, TooLarge
from app.actions.upload import DatasetUpload, KeptDataset
from app.auth.principal import Principal
from app.ui.new_job.option_visibility import COLUMN_ROLES
from tunedeck.settings import Settings
from tunedeck.units import MIB

COPY_CHUNK_BYTES = MIB


@dataclass(frozen=True)
class UploadAnswer:
    dataset: str | None  # the dataset field's new value; None: leave it
    message: str
    columns: dict[str, str] | None = None  # the pickers' new values by role; None: leave them
    show_columns: bool = False  # its columns are not the usual ones: open the pickers


def upload_dataset_from_form(received: str | None, *, principal: Principal, settings: Settings,
                             database) -> UploadAnswer:
    if not received:
        return UploadAnswer(None, "")
    received_path = Path(received)
    try:
        with DatasetUpload(principal, received_path.name, settings=settings) as upload:
            with received_path.open("rb") as reader:
                while chunk := reader.read(COPY_CHUNK_BYTES):
                    upload.write(chunk)
            kept = upload.keep(database=database)
    except TooLarge:  # Gradio caps it first
        return UploadAnswer(None, f"Upload refused: dataset {received_path.name}: larger than "
                                  f"{settings.max_upload_mb} MB")
    except ActionError as refused:
        return UploadAnswer(None, f"Upload refused: {refused}")
    finally:
        received_path.unlink(missing_ok=True)  # Gradio's copy: ours is in the uploads folder
    return _kept_answer(kept, given_name=received_path.name, name=upload.name)


def _kept_answer(kept: KeptDataset, *, given_name: str, name: str) -> UploadAnswer:
    renamed = f" as **{name}**" if name != given_name else ""
    records = "" if kept.records is None else f": {kept.records} records"
    again = " (the same file was uploaded before: that copy is used)" if kept.already_kept else ""
    said = f"Uploaded **{given_name}**{renamed}{records}{again}. The dataset field now names it."
    checked = kept.checked
    if checked.usual_columns:
        return UploadAnswer(str(kept.path), said, columns={role: "" for role in COLUMN_ROLES})
    names = ", ".join(f"`{column}`" for column in checked.columns or [])
    if checked.guessed is None:
        return UploadAnswer(str(kept.path), (
            f"{said} Its columns ({names}) are not prompt/response: choose its prompt and "
            "response columns under **Dataset config, split and columns**."),
            columns={role: "" for role in COLUMN_ROLES}, show_columns=True)
    guessed = checked.guessed.model_dump(exclude_none=True)
    mapped = ", ".join(f"{role} → `{column}`" for role, column in guessed.items())
    return UploadAnswer(str(kept.path), (
        f"{said} Its columns ({names}) are not prompt/response: the column pickers under "
        f"**Dataset config, split and columns** now read {mapped}; change them if that is "
        "wrong."), columns={role: guessed.get(role, "") for role in COLUMN_ROLES},
        show_columns=True)
