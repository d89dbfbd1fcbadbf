""""Retry with…": a failed job becomes a new queued job whose spec carries the change that
would help (tunedeck.jobs.retry_changes picks it); the old job's events say which job retried it."""
from __future__ import annotations

from app.actions.errors import Conflict
from app.actions.job_lookup import find_visible_job
from app.actions.submit import enqueue_stored_job
from app.auth.principal import Principal
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.jobs.states import FAILED
from tunedeck.jobs.retry_changes import NoRetry, RetryChange, retried_spec, retry_change


class RetryRefused(Conflict):
    """Not retried: the job has not failed, or its failure needs a fixed file first."""


def planned_retry(job: Job) -> RetryChange:
    """The change a retry of this failed job would make; RetryRefused when there is none."""
    if job.status != FAILED:
        raise RetryRefused(f"job {job.id} is {job.status}; only a failed job is retried")
    try:
        return retry_change(job.spec_model, job.failure_kind, error=job.error)
    except NoRetry as reason:
        raise RetryRefused(str(reason)) from reason


def retry(principal: Principal, job_id: int, *, database: Database, celery_app,
          client: str | None = None) -> tuple[Job, RetryChange]:
    """The new job and the change it carries. The new job, the old job's event and the audit
    record are stored in one transaction, then the new job is enqueued. NotFound for a job
    the principal may not see; RetryRefused (a Conflict) when there is no retry to make."""
    with database.transaction() as session:
        job = find_visible_job(session=session, principal=principal, job_id=job_id)
        change = planned_retry(job)
        # The retry is the failed job's owner's, whoever pressed the button.
        new_job = job_store.create_job(session=session, spec=retried_spec(job.spec_model, change),
                                       owner=job.owner)
        job_store.add_job_event(session=session, job_id=job_id, kind="retry",
                                message=f"retried as job {new_job.id} ({change.label})")
        audit.record(session=session, actor=principal.name, action=audit.RETRY, job_id=job_id,
                     detail=f"as job {new_job.id} ({change.label})", client=client)
    enqueue_stored_job(celery_app, new_job)
    return new_job, change
