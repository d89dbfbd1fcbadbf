"""The Celery app of a worker host and its one task, as thin as a web view."""
from __future__ import annotations

from functools import lru_cache

from celery.signals import worker_ready

from tunedeck import job_store
from tunedeck.broker import RUN_JOB_TASK, enqueue_job, make_celery
from tunedeck.db.engine import Database
from tunedeck.settings import load_settings
from worker.job_runner import run_job

settings = load_settings()
celery_app = make_celery(settings)


@lru_cache(maxsize=1)
def worker_database() -> Database:
    return Database(settings.resolved_database_url)


@celery_app.task(name=RUN_JOB_TASK)
def run_job_task(job_id: int) -> str:
    return run_job(job_id, settings=settings, database=worker_database())


@worker_ready.connect
def redispatch_queued_jobs(**_kwargs) -> None:
    """Re-send every queued job at start: a message lost with a dead worker or a broker
    restart must not strand a job. Duplicates are harmless: only one claim succeeds."""
    with worker_database().transaction() as session:
        queued_job_ids = job_store.list_queued_job_ids(session=session)
    for job_id in queued_job_ids:
        enqueue_job(celery_app, job_id)
