"""What the job page's buttons do (Cancel, Resume, Retry with…, Compare backends) and its
checkpoints table: plain values in, plain values out. Each button calls the API's own action
(app/actions/)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from app.actions.checkpoints import list_checkpoints, resume
from app.actions.compare_backends import compare_backends
from app.actions.errors import NotFound, Refused
from app.actions.retry import retry
from app.actions.submit import cancel
from app.auth.principal import Principal
from app.ui.job_ids import parse_job_id
from tunedeck.db.models import Job
from tunedeck.jobs.states import CANCELLED, FAILED, RUNNING
from tunedeck.units import MIB

CHECKPOINT_COLUMNS = ["step", "saved (UTC)", "size (MB)", "folder"]


def checkpoints_frame(job: Job | None) -> pd.DataFrame:
    """The job's complete checkpoints, newest first (an empty table for no job)."""
    if job is None:
        return pd.DataFrame(columns=CHECKPOINT_COLUMNS)
    rows = [[checkpoint["step"], checkpoint["saved_at"][:19].replace("T", " "),
             round(checkpoint["bytes"] / MIB, 1), checkpoint["path"]]
            for checkpoint in list_checkpoints(job)]
    return pd.DataFrame(rows, columns=CHECKPOINT_COLUMNS)


def is_resumable(status: str | None, checkpoints: pd.DataFrame) -> bool:
    return status in (FAILED, CANCELLED) and not checkpoints.empty


def cancel_from_page(job_id: Any, *, database, principal: Principal) -> str:
    job_id = parse_job_id(job_id)
    if job_id is None:
        return "Pick a job first."
    try:
        job = cancel(principal, job_id, database=database)
    except NotFound:
        return f"There is no job {job_id}."
    if job.status == RUNNING:
        return f"Cancel requested: job {job_id} stops within seconds."
    return f"Job {job_id} is `{job.status}`."


def resume_from_page(job_id: Any, *, database, celery_app, principal: Principal) -> str:
    job_id = parse_job_id(job_id)
    if job_id is None:
        return "Pick a job first."
    try:
        resume(principal, job_id, database=database, celery_app=celery_app)
    except NotFound:
        return f"There is no job {job_id}."
    except Refused as reason:
        return f"Not resumed: {reason}"
    return f"Job {job_id} is queued again; it resumes from its latest checkpoint."


def retry_from_page(job_id: Any, *, database, celery_app, principal: Principal) -> str:
    """"Retry with…": a new job with the change; says which job to open."""
    job_id = parse_job_id(job_id)
    if job_id is None:
        return "Pick a job first."
    try:
        new_job, change = retry(principal, job_id, database=database, celery_app=celery_app)
    except NotFound:
        return f"There is no job {job_id}."
    except Refused as reason:
        return f"Not retried: {reason}"
    return f"Retried as job {new_job.id} ({change.label}): open it by its id."


def compare_backends_from_page(job_id: Any, *, database, celery_app,
                               principal: Principal) -> tuple[str, str | None]:
    """Start the ZeRO-2 and FSDP copies of the job: the message, and the ids to compare
    (None when nothing started)."""
    job_id = parse_job_id(job_id)
    if job_id is None:
        return "Pick a job first.", None
    try:
        jobs = compare_backends(principal, job_id, database=database, celery_app=celery_app)
    except NotFound:
        return f"There is no job {job_id}.", None
    except Refused as reason:
        return f"Not compared: {reason}", None
    ids = f"{jobs[0].id}, {jobs[1].id}"
    return (f"Started jobs {jobs[0].id} and {jobs[1].id}; open Compare with ids "
            f"{jobs[0].id},{jobs[1].id}"), ids
