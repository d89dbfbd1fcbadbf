"""The Celery app of a worker host and its tasks, each as thin as a web view."""
from __future__ import annotations

import threading
from pathlib import Path
from functools import lru_cache

from celery.signals import worker_ready, worker_shutting_down

from tunedeck.broker import (PREFLIGHT_DATASET_TASK, RUN_JOB_NODE_TASK, RUN_JOB_TASK,
                             enqueue_job, make_celery, send_node_to_worker, send_to_worker)
from tunedeck.db.engine import Database
from tunedeck.job_states import FINISHED_STATUSES
from tunedeck.settings import load_settings
from worker.dataset_preflight import run_dataset_preflight
from worker.heartbeat import Heartbeat
from worker.job_claim import jobs_to_offer
from worker.job_runner import run_job, standby_environment
from worker.node_runner import run_job_node
from worker.recovery import settle_jobs_whose_launcher_is_gone
from worker.warm_launcher import WarmLauncher
from worker.worker_identity import WorkerIdentity

settings = load_settings()
celery_app = make_celery(settings)
# Set when the worker is told to stop: running jobs are stopped and marked failed rather
# than left behind (they were acknowledged on receipt, so no other worker would run them).
shutdown_requested = threading.Event()


@lru_cache(maxsize=1)
def worker_database() -> Database:
    return Database(settings.resolved_database_url)


@lru_cache(maxsize=1)
def worker_identity() -> WorkerIdentity:
    return WorkerIdentity.from_settings(settings)


@lru_cache(maxsize=1)
def heartbeat() -> Heartbeat:
    return Heartbeat(identity=worker_identity(), settings=settings, database=worker_database(),
                     send=lambda job_id, spec: enqueue_job(celery_app, job_id, spec))


@lru_cache(maxsize=1)
def warm_launcher() -> WarmLauncher | None:
    """The standby launcher of this worker (None with TUNEDECK_WARM_START=false)."""
    if not settings.warm_start:
        return None
    return WarmLauncher(folder=settings.home_dir / "warm" / worker_identity().name,
                        environment=standby_environment(), cwd=Path.cwd())


def hand_on(job_id: int, worker_name: str) -> None:
    send_to_worker(celery_app, job_id, worker_name)


@celery_app.task(name=RUN_JOB_TASK)
def run_job_task(job_id: int) -> str:
    status = run_job(job_id, settings=settings, database=worker_database(),
                     shutdown_requested=shutdown_requested.is_set, identity=worker_identity(),
                     hand_on=hand_on,
                     start_node=lambda job, node, worker: send_node_to_worker(celery_app, job,
                                                                              node, worker),
                     warm=warm_launcher())
    if status in FINISHED_STATUSES:
        offer_waiting_jobs()
        if warm_launcher() is not None and not shutdown_requested.is_set():
            warm_launcher().replenish()  # the next job's, now that this one's CPU is free
    return status


@celery_app.task(name=RUN_JOB_NODE_TASK)
def run_job_node_task(job_id: int, node_rank: int) -> str:
    status = run_job_node(job_id, node_rank, settings=settings, database=worker_database(),
                          identity=worker_identity(), shutdown_requested=shutdown_requested.is_set)
    if status != "not started":
        offer_waiting_jobs()
    return status


@celery_app.task(name=PREFLIGHT_DATASET_TASK)
def preflight_dataset_task(preflight_id: int) -> str:
    """A few seconds on the worker's spare thread (tunedeck.broker.PREFLIGHT_THREADS)."""
    return run_dataset_preflight(preflight_id, settings=settings, database=worker_database(),
                                 worker_name=worker_identity().name)


def offer_waiting_jobs() -> None:
    """A job here ended and its GPUs are free again: jobs waiting for them get a turn now."""
    if not shutdown_requested.is_set():
        for waiting_job_id in jobs_to_offer(identity=worker_identity(), database=worker_database()):
            hand_on(waiting_job_id, worker_identity().name)


@worker_shutting_down.connect
def stop_running_jobs(**_kwargs) -> None:
    shutdown_requested.set()
    heartbeat().stop()
    if warm_launcher() is not None:
        warm_launcher().stop()


@worker_ready.connect
def settle_jobs_at_start(**_kwargs) -> None:
    """Settle this host's jobs whose worker died, start the heartbeat, then re-send every
    queued job this worker serves: a message lost with a dead worker or a broker restart
    must not strand a job. Duplicates are harmless: only one claim succeeds."""
    identity = worker_identity()
    with worker_database().transaction() as session:
        settled = settle_jobs_whose_launcher_is_gone(session=session, worker_host=identity.host)
    for job_id, spec in settled.to_send:
        enqueue_job(celery_app, job_id, spec)
    heartbeat().start()
    if warm_launcher() is not None:
        warm_launcher().replenish()
    for job_id in jobs_to_offer(identity=identity, database=worker_database(), limit=1000):
        hand_on(job_id, identity.name)
