"""Room on the disk under the run folders, before a job starts and after one failed.

Before: a job whose checkpoints and export (tunedeck/planner/disk_need.py) would not fit in
the free space under TUNEDECK_HOME/runs stays queued, saying so, instead of starting to fail
at its first checkpoint that no longer fits; the sweep sends it again, so it starts by
itself once there is room (as a job waiting for GPUs does). After: the triage is told how
much room is left (the ranks' notices and torchrun's log live on that disk, and a full disk
may have swallowed them), and a disk-full run's half-written checkpoint is removed.
"""
from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tunedeck.jobs.failure_kinds import DISK_ADVICE, DISK_HOLD_WORDS, megabytes
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.disk_need import disk_need
from tunedeck.planner.shape_source import resolve_model_shape
from tunedeck.run_folder import RunFolder, remove_partial_checkpoints
from tunedeck.settings import Settings

log = logging.getLogger(__name__)


def free_bytes_under(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the disk holding `path` (or its nearest
    existing parent: a run folder is made at launch); None when it cannot be read."""
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def bytes_in(folder: Path) -> int:
    """What the files under `folder` hold (0 when there is no such folder)."""
    total = 0
    for file in folder.rglob("*"):
        try:
            total += file.stat().st_size if file.is_file() else 0
        except OSError:  # removed while we looked (the trainer's rotation)
            continue
    return total


def disk_hold_reason(*, runs_dir: Path, free_bytes: int | None, needed_bytes: int) -> str | None:
    """Why a job stays queued for room on the disk, or None when it fits (or the free space
    cannot be read: a check that cannot measure holds nothing back)."""
    if free_bytes is None or free_bytes >= needed_bytes:
        return None
    return (f"waiting: the disk under {runs_dir} {DISK_HOLD_WORDS} "
            f"({megabytes(free_bytes)} free, {megabytes(needed_bytes)} needed): {DISK_ADVICE}")


@dataclass(frozen=True)
class DiskRoom:
    """The disk of one worker's run folders (`run_dir_for(job_id)`, under `runs_dir`)."""

    runs_dir: Path
    run_dir_for: Callable[[int], Path]

    @classmethod
    def of(cls, settings: Settings) -> "DiskRoom":
        return cls(settings.runs_dir, settings.run_dir_for)

    def hold_reason(self, spec: JobSpec, *, job_id: int, resuming: bool) -> str | None:
        """Why the job must wait for room before it starts here, or None. A resumed job
        has written some of its checkpoints already; a model the planner cannot size is
        not held (its need is unknown)."""
        try:
            needed = disk_need(spec, resolve_model_shape(spec.model)).total_bytes
        except ValueError:
            return None
        run = RunFolder(self.run_dir_for(job_id))
        if resuming:
            needed = max(0, needed - bytes_in(run.checkpoints_dir))
        return disk_hold_reason(runs_dir=self.runs_dir, free_bytes=free_bytes_under(run.path),
                                needed_bytes=needed)


def clear_half_checkpoints(run: RunFolder) -> None:
    """After a disk-full failure: the checkpoint the ranks were writing can never complete
    (a resume would remove it too), and it holds the room a retry needs."""
    try:
        removed = remove_partial_checkpoints(run)
    except OSError as error:
        log.warning("could not remove the half-written checkpoints in %s: %s", run.path, error)
        return
    for path in removed:
        log.info("removed the half-written checkpoint %s (the disk was full)", path)
