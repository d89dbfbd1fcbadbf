"""Submitting a job: store the row, commit, then enqueue its id. One path for API and UI."""
from __future__ import annotations

import logging

from tunedeck import job_store
from tunedeck.broker import enqueue_job
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.job_spec import JobSpec

log = logging.getLogger(__name__)


def submit_job(*, database: Database, celery_app, spec: JobSpec, owner: str | None = None) -> Job:
    with database.transaction() as session:
        job = job_store.create_job(session=session, spec=spec, owner=owner)
    try:
        enqueue_job(celery_app, job.id, job.spec)
    except Exception:  # the row is the record; a worker's start-up sweep re-sends it
        log.exception("job %s stored but not enqueued; a worker will pick it up on start", job.id)
    return job


def cancel_job(*, database: Database, job_id: int) -> Job:
    with database.transaction() as session:
        return job_store.request_cancel(session=session, job_id=job_id)
