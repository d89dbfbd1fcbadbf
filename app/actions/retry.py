""""Retry with…": a failed job becomes a new queued job whose spec carries the change that
would help (tunedeck.retry_changes picks it); the old job's events say which job retried it."""
from __future__ import annotations

import logging

from tunedeck import job_store
from tunedeck.broker import enqueue_job
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.job_spec import JobSpec
from tunedeck.job_states import FAILED
from tunedeck.retry_changes import NoRetry, RetryChange, retried_spec, retry_change

log = logging.getLogger(__name__)


class RetryRefused(Exception):
    """Not retried: the job has not failed, or its failure needs a fixed file first."""


def planned_retry(job: Job) -> RetryChange:
    """The change a retry of this failed job would make; RetryRefused when there is none."""
    if job.status != FAILED:
        raise RetryRefused(f"job {job.id} is {job.status}; only a failed job is retried")
    try:
        return retry_change(JobSpec.model_validate(job.spec), job.failure_kind, error=job.error)
    except NoRetry as reason:
        raise RetryRefused(str(reason)) from reason


def retry_job(*, database: Database, celery_app, job_id: int) -> tuple[Job, RetryChange]:
    """Store the new job and the old job's event in one transaction, then enqueue."""
    with database.transaction() as session:
        job = job_store.get_job(session=session, job_id=job_id)
        change = planned_retry(job)
        spec = retried_spec(JobSpec.model_validate(job.spec), change)
        # The retry is the failed job's owner's, whoever pressed the button.
        new_job = job_store.create_job(session=session, spec=spec, owner=job.owner)
        job_store.add_job_event(session=session, job_id=job_id, kind="retry",
                                message=f"retried as job {new_job.id} ({change.label})")
    try:
        enqueue_job(celery_app, new_job.id, new_job.spec)
    except Exception:  # the row is the record; a worker's start-up sweep re-sends it
        log.exception("job %s stored but not enqueued; a worker will pick it up on start",
                      new_job.id)
    return new_job, change
