"""A job's checkpoints as the web shows them, and "Resume" from the latest one.

The trainer writes checkpoints into the run folder (`checkpoints/step-N/`, complete once its
`trainer_state.json` exists); the web only reads that folder and queues the job again.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app.actions.errors import Conflict
from app.actions.job_lookup import find_visible_job
from app.auth.principal import Principal
from tunedeck.jobs import states as job_states
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit
from tunedeck.services.broker import enqueue_job
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.run_folder import CHECKPOINT_STATE_FILE, RunFolder


class NothingToResume(Conflict):
    """The job cannot be resumed (no checkpoint, or a status that does not allow it)."""


def list_checkpoints(job: Job) -> list[dict[str, Any]]:
    """Complete checkpoints, newest first: step, folder, size and when it was saved."""
    if not job.run_dir:
        return []
    checkpoints = []
    for step, path in reversed(RunFolder(Path(job.run_dir)).completed_checkpoints()):
        saved = (path / CHECKPOINT_STATE_FILE).stat().st_mtime
        checkpoints.append({
            "step": step,
            "path": str(path),
            "bytes": _folder_bytes(path),
            "saved_at": datetime.fromtimestamp(saved, timezone.utc).isoformat(),
        })
    return checkpoints


def _folder_bytes(path: Path) -> int:
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def resume(principal: Principal, job_id: int, *, database: Database, celery_app,
           client: str | None = None) -> Job:
    """Queue a failed or cancelled job again; its trainer continues from the latest
    checkpoint with the same data order and schedule. NotFound for a job the principal may
    not see, NothingToResume (a Conflict) for one without a checkpoint or in another state."""
    with database.transaction() as session:
        job = find_visible_job(session=session, principal=principal, job_id=job_id)
        if job.status not in (job_states.FAILED, job_states.CANCELLED):
            raise NothingToResume(f"job {job_id} is {job.status}; only a failed or cancelled "
                                  "job can be resumed")
        checkpoints = list_checkpoints(job)
        if not checkpoints:
            raise NothingToResume(
                f"job {job_id} has no complete checkpoint to resume from (set "
                "checkpoint_every_steps in the spec to save them); submit its spec again instead")
        try:
            job = job_store.resume_job(session=session, job_id=job_id,
                                       checkpoint_step=checkpoints[0]["step"])
        except job_states.InvalidTransition as error:
            raise NothingToResume(str(error)) from error
        audit.record(session=session, actor=principal.name, action=audit.RESUME, job_id=job_id,
                     client=client)
    enqueue_job(celery_app, job_id, job.spec_model)
    return job
