"""Zips of a job's merged model and adapter, built once in the run folder and then served.

No path from the request reaches the file system: the folder comes from the job row.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

from tunedeck.run_folder import RunFolder

ARTIFACT_KINDS = ("merged", "adapter")
DOWNLOADS_DIR = "downloads"


def artifact_folder(run: RunFolder, kind: str) -> Path:
    return run.merged_dir if kind == "merged" else run.adapter_dir


def artifact_zip(run: RunFolder, kind: str) -> Path | None:
    """The zip of `kind` (built on first request), or None while the folder doesn't exist."""
    folder = artifact_folder(run, kind)
    if not folder.is_dir():
        return None
    zip_path = run.path / DOWNLOADS_DIR / f"{kind}.zip"
    if zip_path.is_file() and zip_path.stat().st_mtime >= folder.stat().st_mtime:
        return zip_path
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    partial = zip_path.with_name(f"{zip_path.name}.{os.getpid()}.partial")
    # Weights don't compress; storing keeps a multi-GB download quick to build.
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for file in sorted(folder.rglob("*")):
            if file.is_file() and not file.is_symlink():
                archive.write(file, arcname=f"{kind}/{file.relative_to(folder).as_posix()}")
    partial.replace(zip_path)
    return zip_path
