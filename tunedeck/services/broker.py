"""The Celery app both sides share: the web sends task names, the worker registers them.

Default broker: kombu's server-less filesystem transport in a folder under TUNEDECK_HOME,
so one host needs no server; Redis (or any Celery broker) when TUNEDECK_BROKER_URL says so.
The broker only carries job ids; the database is the record of what must run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tunedeck.cluster.placement import (DEFAULT_QUEUE, Placement, broker_queue_for,
                                        queue_broker_queue, worker_broker_queue)
from tunedeck.settings import Settings

if TYPE_CHECKING:
    from celery import Celery

RUN_JOB_TASK = "tunedeck.run_job"
RUN_JOB_NODE_TASK = "tunedeck.run_job_node"
PREFLIGHT_DATASET_TASK = "tunedeck.preflight_dataset"
GENERATE_TASK = "tunedeck.generate"
# Pool threads a worker keeps beyond its job slots. A job's task holds its thread for
# hours, and claims never run more jobs than slots (tunedeck.cluster.placement.room_for), so
# this thread is always free of jobs: a preflight (or a "Try it" generation) waits at most
# for run_job messages that find no room (each returns at once) and for another preflight or
# generation, never for a job.
PREFLIGHT_THREADS = 1
JOBS_QUEUE = queue_broker_queue(DEFAULT_QUEUE)


def make_celery(settings: Settings) -> "Celery":
    from celery import Celery

    app = Celery("tunedeck", broker=settings.resolved_broker_url)
    app.conf.update(
        task_default_queue=JOBS_QUEUE,
        task_ignore_result=True,
        result_backend=None,
        # Jobs run for hours: take one at a time, acknowledge on receipt. The job row (not a
        # redelivered message) says whether a job still has to run.
        worker_prefetch_multiplier=1,
        task_acks_late=False,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if settings.uses_embedded_broker:
        from tunedeck.services.broker_files import TRANSPORT  # kombu's, each message written whole

        app.conf.broker_transport = TRANSPORT
        app.conf.broker_transport_options = _filesystem_transport_options(settings)
    else:
        app.conf.broker_transport_options = {
            "visibility_timeout": settings.broker_visibility_timeout_seconds}
    return app


def _filesystem_transport_options(settings: Settings) -> dict:
    queue_folder = settings.broker_folder / "queue"
    control_folder = settings.broker_folder / "control"
    for folder in (queue_folder, control_folder):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(queue_folder),
        "data_folder_out": str(queue_folder),
        "control_folder": str(control_folder),
        "store_processed": False,
        # How often an idle worker lists the queue folder for a new job: a submitted job
        # waits half of it on average before it is picked up. One look at two queues costs
        # ~22 us of CPU (0.02% of a core at this rate; measured for bench/first_point.py).
        "polling_interval": 0.1,
    }


def enqueue_job(celery_app: "Celery", job_id: int, spec: Placement) -> None:
    """Send the job id (never the spec) by task name, to the queue of the workers that may
    run it (its spec decides: its queue or host); call only after the row is committed."""
    celery_app.send_task(RUN_JOB_TASK, args=[job_id], queue=broker_queue_for(spec))


def send_node_to_worker(celery_app: "Celery", job_id: int, node_rank: int,
                        worker_name: str) -> None:
    """Tell a worker to run its node of a job on several nodes."""
    celery_app.send_task(RUN_JOB_NODE_TASK, args=[job_id, node_rank],
                         queue=worker_broker_queue(worker_name))


def send_to_worker(celery_app: "Celery", job_id: int, worker_name: str) -> None:
    """Hand a job's id to one worker (one that has room for it)."""
    celery_app.send_task(RUN_JOB_TASK, args=[job_id], queue=worker_broker_queue(worker_name))


def send_preflight(celery_app: "Celery", preflight_id: int, spec: Placement) -> None:
    """Send a stored preflight's id to the queue of the workers that would run a job of
    `spec` (its queue or host): they can read its data. Only after the row is committed."""
    celery_app.send_task(PREFLIGHT_DATASET_TASK, args=[preflight_id], queue=broker_queue_for(spec))


def send_generation(celery_app: "Celery", generation_id: int, worker_name: str) -> None:
    """Send a stored generation's id to the worker that ran its job (the weights are in its
    run folder). Only after the row is committed."""
    celery_app.send_task(GENERATE_TASK, args=[generation_id],
                         queue=worker_broker_queue(worker_name))
