"""What the New job form offers under its model and dataset fields: the user's recent
values (from their own jobs, newest first), the built-in ones, what the allowed folders
hold (model folders, dataset files and saved datasets) and the user's uploaded datasets.

Only names are listed, never contents: a folder is a model when it has a config.json, a
saved dataset when it has datasets' dataset_info.json or dataset_dict.json. The scan stops
at two levels below each allowed folder and at SCAN_LIMIT entries, so a huge data folder
cannot slow the form."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.auth.job_access import visible_jobs
from app.auth.principal import Principal
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings

RECENT_JOBS = 50
SCAN_DEPTH = 2
SCAN_LIMIT = 500
DATASET_FILE_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".parquet", ".csv")
SAVED_DATASET_MARKERS = ("dataset_info.json", "dataset_dict.json")


@dataclass(frozen=True)
class Suggestions:
    models: list[str]
    datasets: list[str]


def input_suggestions(*, database, principal: Principal, settings: Settings) -> Suggestions:
    with database.transaction() as session:
        jobs = visible_jobs(session=session, principal=principal, limit=RECENT_JOBS,
                            owner=None if principal.open_access else principal.name)
        specs = [job.spec_model for job in jobs]  # newest first
    found_models, found_datasets = [], []
    for root in settings.allowed_root_paths:
        for path in _entries(root):
            if path.is_dir() and (path / "config.json").is_file():
                found_models.append(str(path))
            elif path.is_dir() and _is_whole(path):
                found_datasets.append(str(path))
            elif path.is_file() and path.name.endswith(DATASET_FILE_SUFFIXES):
                found_datasets.append(str(path))
    uploads = settings.upload_dir_for(principal.name)
    uploaded = sorted((str(path) for path in uploads.glob("*") if path.is_file()
                       and not path.name.startswith(".")), reverse=True) \
        if uploads.is_dir() else []
    return Suggestions(
        models=_unique([spec.model for spec in specs],
                       [JobSpec.model_fields["model"].default], sorted(found_models)),
        datasets=_unique([spec.dataset for spec in specs],
                         [JobSpec.model_fields["dataset"].default], uploaded,
                         sorted(found_datasets)))


def _entries(root: Path) -> Iterator[Path]:
    """Up to SCAN_LIMIT paths at most SCAN_DEPTH levels under `root`, hidden ones skipped."""
    seen, level = 0, [root]
    for _depth in range(SCAN_DEPTH):
        below = []
        for folder in level:
            try:
                children = sorted(folder.iterdir())
            except OSError:  # gone, or not readable by the web process
                continue
            for child in children:
                if child.name.startswith("."):
                    continue
                seen += 1
                if seen > SCAN_LIMIT:
                    return
                yield child
                if child.is_dir() and not _is_whole(child):
                    below.append(child)
        level = below


def _is_whole(folder: Path) -> bool:
    """A model or a saved dataset: one thing to offer, its own files are not."""
    return any((folder / marker).is_file() for marker in ("config.json", *SAVED_DATASET_MARKERS))


def _unique(*groups: list[str]) -> list[str]:
    out: list[str] = []
    for group in groups:
        for value in group:
            if value not in out:
                out.append(value)
    return out
