"""The Celery app of a worker host and its one task, as thin as a web view."""
from __future__ import annotations

import socket
import threading
from functools import lru_cache

from celery.signals import worker_ready, worker_shutting_down

from tunedeck import job_store
from tunedeck.broker import RUN_JOB_TASK, enqueue_job, make_celery
from tunedeck.db.engine import Database
from tunedeck.settings import load_settings
from worker.job_runner import run_job
from worker.recovery import fail_jobs_whose_launcher_is_gone

settings = load_settings()
celery_app = make_celery(settings)
# Set when the worker is told to stop: running jobs are stopped and marked failed rather
# than left behind (they were acknowledged on receipt, so no other worker would run them).
shutdown_requested = threading.Event()


@lru_cache(maxsize=1)
def worker_database() -> Database:
    return Database(settings.resolved_database_url)


@celery_app.task(name=RUN_JOB_TASK)
def run_job_task(job_id: int) -> str:
    return run_job(job_id, settings=settings, database=worker_database(),
                   shutdown_requested=shutdown_requested.is_set)


@worker_shutting_down.connect
def stop_running_jobs(**_kwargs) -> None:
    shutdown_requested.set()


@worker_ready.connect
def settle_jobs_at_start(**_kwargs) -> None:
    """Settle this host's jobs whose worker died, then re-send every queued job: a message
    lost with a dead worker or a broker restart must not strand a job. Duplicates are
    harmless: only one claim succeeds."""
    with worker_database().transaction() as session:
        fail_jobs_whose_launcher_is_gone(session=session, worker_host=socket.gethostname())
        queued_job_ids = job_store.list_queued_job_ids(session=session)
    for job_id in queued_job_ids:
        enqueue_job(celery_app, job_id)
