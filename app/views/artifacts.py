"""Zips of a job's merged model, adapter and TensorBoard event files, built in the run
folder (again when the folder changed) and then served, and what each holds (dtype, bytes,
files) for the job page and the API.

No path from the request reaches the file system: the folder comes from the job row.
Nothing holds a whole file or archive in memory: the zip is written to disk (zipfile copies
each file in 8 KB pieces, stored, not compressed), and FileResponse sends it in 64 KB
chunks (with Range support, so a broken multi-GB download resumes). A zip streamed on the
fly would save the disk copy but lose Content-Length and resuming, and redo the work on
every download.
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from tunedeck.run_folder import RunFolder
from tunedeck.safetensors_headers import HeaderError, folder_dominant_float_dtype

ARTIFACT_KINDS = ("merged", "adapter", "tensorboard")
WEIGHT_KINDS = ("merged", "adapter")
DOWNLOADS_DIR = "downloads"


def artifact_folder(run: RunFolder, kind: str) -> Path:
    return {"merged": run.merged_dir, "adapter": run.adapter_dir,
            "tensorboard": run.tensorboard_dir}[kind]


def _newest_change(folder: Path) -> float:
    """The folder's newest modification, its files' included: TensorBoard appends to its
    event files, which leaves the folder's own time as it was."""
    return max([folder.stat().st_mtime,
                *(file.stat().st_mtime for file in artifact_files(folder))])


def artifact_zip(run: RunFolder, kind: str) -> Path | None:
    """The zip of `kind` (built on first request), or None while the folder doesn't exist."""
    folder = artifact_folder(run, kind)
    if not folder.is_dir():
        return None
    zip_path = run.path / DOWNLOADS_DIR / f"{kind}.zip"
    if zip_path.is_file() and zip_path.stat().st_mtime >= _newest_change(folder):
        return zip_path
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    # A name of its own per build: two requests in one web process (one pid, two threads)
    # must not write into the same partial file.
    descriptor, partial_name = tempfile.mkstemp(prefix=f".{kind}-", suffix=".zip.partial",
                                                dir=zip_path.parent)
    os.close(descriptor)
    partial = Path(partial_name)
    try:
        # Weights don't compress; storing keeps a multi-GB download quick to build.
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED,
                             allowZip64=True) as archive:
            for file in artifact_files(folder):
                archive.write(file, arcname=f"{kind}/{file.relative_to(folder).as_posix()}")
        partial.chmod(0o644)  # mkstemp's 0600 would hide it from other readers
        partial.replace(zip_path)
    finally:
        partial.unlink(missing_ok=True)
    return zip_path


def artifact_files(folder: Path) -> list[Path]:
    """What the zip holds: the folder's regular files (no links), sorted."""
    return [file for file in sorted(folder.rglob("*")) if file.is_file() and not file.is_symlink()]


def artifact_summary(run: RunFolder, kind: str) -> dict | None:
    """{dtype, bytes, files} of `kind`'s folder, or None while it doesn't exist: dtype is
    the floating dtype holding the most elements (safetensors' name, e.g. "BF16", from the
    headers alone: the web has no torch), bytes and files are what the zip holds."""
    folder = artifact_folder(run, kind)
    if not folder.is_dir():
        return None
    try:
        files = artifact_files(folder)
        size = sum(file.stat().st_size for file in files)
    except OSError:
        return None  # replaced by a rerun's export while it was listed: no download to show
    if kind not in WEIGHT_KINDS:
        return {"bytes": size, "files": len(files)}
    try:
        dtype = folder_dominant_float_dtype(folder)
    except (OSError, HeaderError):
        dtype = None  # a damaged weights file: still list the download, without a dtype
    return {"dtype": dtype, "bytes": size, "files": len(files)}


def summary_text(summary: dict) -> str:
    """e.g. "BF16, 1.2 GB (9 files)"; "45 KB (2 files)" for what holds no weights."""
    count = summary["files"]
    dtype = f"{summary['dtype'] or 'no weights'}, " if "dtype" in summary else ""
    return (f"{dtype}{readable_bytes(summary['bytes'])} "
            f"({count} file{'' if count == 1 else 's'})")


def readable_bytes(size: int) -> str:
    """Decimal units, as download sizes are usually shown: 4.5 MB, 1.2 GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            break
        size /= 1000
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
