"""Delete a job (its rows and its run folder) and archive or unarchive one.

Deleting is for finished jobs only: a queued or running job's trainer could still write
into the folder. The run folder is removed only when it lies inside the configured runs
root, so a row whose run_dir names anything else never costs a file outside TuneDeck's."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from app.actions.errors import Conflict
from app.actions.job_lookup import find_visible_job
from app.auth.principal import Principal
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.settings import Settings


class JobStillActive(Conflict):
    """Not deleted: the job is queued or running; cancel it first."""


@dataclass(frozen=True)
class Deleted:
    job_id: int
    # The folder removed, or None; `folder_note` says why one was left (not on this host,
    # outside the runs root, or it could not be removed).
    run_dir: str | None
    folder_removed: bool
    folder_note: str


def run_folder_inside_runs_root(run_dir: str | None, runs_root: Path) -> Path | None:
    """The run folder to remove: `run_dir` resolved (symlinks followed), if it lies strictly
    inside the resolved runs root; None for anything else, the root itself included."""
    if not run_dir:
        return None
    root = runs_root.resolve()
    folder = Path(run_dir).resolve()
    if folder == root or not folder.is_relative_to(root):
        return None
    return folder


def delete_job(principal: Principal, job_id: int, *, database: Database, settings: Settings,
               client: str | None = None) -> Deleted:
    """Delete a finished job's rows and audit it in one transaction, then its run folder.
    NotFound for a job the principal may not see (only its owner or an admin deletes it);
    JobStillActive (a Conflict) for a queued or running one. The rows go first: a folder
    left behind is only disk, a row left without its folder would be a broken job page."""
    with database.transaction() as session:
        job = find_visible_job(session=session, principal=principal, job_id=job_id)
        run_dir = job.run_dir
        try:
            job_store.delete_job(session=session, job_id=job_id)
        except job_store.JobStillActive as error:
            raise JobStillActive(str(error)) from error
        audit.record(session=session, actor=principal.name, action=audit.DELETE, job_id=job_id,
                     detail=f"{job.name}; run folder {run_dir or 'none'}", client=client)
    return _remove_run_folder(job_id, run_dir, settings.runs_dir)


def _remove_run_folder(job_id: int, run_dir: str | None, runs_root: Path) -> Deleted:
    if not run_dir:
        return Deleted(job_id, None, False, "the job had no run folder")
    folder = run_folder_inside_runs_root(run_dir, runs_root)
    if folder is None:
        return Deleted(job_id, run_dir, False,
                       f"run folder {run_dir} left in place: it is not inside the runs root "
                       f"{runs_root}")
    if not folder.exists():
        # A folder on a worker host this server does not share is that host's to clean.
        return Deleted(job_id, run_dir, False,
                       f"run folder {run_dir} is not on this host; nothing removed here")
    try:
        shutil.rmtree(folder)
    except OSError as error:
        return Deleted(job_id, run_dir, False, f"run folder {run_dir} not removed: {error}")
    return Deleted(job_id, run_dir, True, f"run folder {run_dir} removed")


def set_archived(principal: Principal, job_id: int, archived: bool, *, database: Database,
                 client: str | None = None) -> Job:
    """Archive (hide from listings) or unarchive a job, any status; NotFound for a job the
    principal may not see."""
    with database.transaction() as session:
        find_visible_job(session=session, principal=principal, job_id=job_id)
        job = job_store.set_job_archived(session=session, job_id=job_id, archived=archived)
        audit.record(session=session, actor=principal.name,
                     action=audit.ARCHIVE if archived else audit.UNARCHIVE, job_id=job_id,
                     client=client)
    return job
