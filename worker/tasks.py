"""The Celery app of a worker host and its tasks, each as thin as a web view.

`build_worker(settings)` makes them from the Settings the command line read (nothing is
read at import): a `WorkerProcess` holding what the process shares (database, identity,
heartbeat, warm launcher), its Celery app with the tasks registered, and the hooks
Celery calls when the worker is ready and when it stops.
"""
from __future__ import annotations

import threading
from functools import cached_property
from pathlib import Path

from celery.signals import worker_ready, worker_shutting_down

from tunedeck.services.broker import (GENERATE_TASK, PREFLIGHT_DATASET_TASK, RUN_JOB_NODE_TASK,
                             RUN_JOB_TASK, enqueue_job, make_celery, send_generation,
                             send_node_to_worker, send_to_worker)
from tunedeck.data.preflight_store import PREFLIGHTS
from tunedeck.db.engine import Database
from tunedeck.db.models import utc_now
from tunedeck.generation.store import GENERATIONS
from tunedeck.services.logs import for_job
from tunedeck.settings import Settings
from worker.dataset_preflight import run_dataset_preflight
from worker.generation import WarmGenerator, run_generation
from worker.heartbeat import Heartbeat
from worker.job_claim import jobs_to_offer
from worker.job_runner import run_job
from worker.launch import standby_environment
from worker.monitoring.exporter import serve_worker_metrics
from worker.node_runner import run_job_node
from worker.outcome import Outcome
from worker.recovery import settle_jobs_whose_launcher_is_gone
from worker.slurm.executor import SlurmExecutor
from worker.warm_launcher import WarmLauncher
from worker.worker_identity import WorkerIdentity


class WorkerProcess:
    """What one worker process shares among its task threads, each made on first use."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.started_at = utc_now()  # before Celery hands this process any job
        self.celery_app = make_celery(settings)
        # Set when the worker is told to stop: running jobs are stopped and marked failed
        # rather than left behind (they were acknowledged on receipt, so no other worker
        # would run them).
        self.shutdown_requested = threading.Event()

    @cached_property
    def database(self) -> Database:
        return Database(self.settings.resolved_database_url)

    @cached_property
    def identity(self) -> WorkerIdentity:
        return WorkerIdentity.from_settings(self.settings)

    @cached_property
    def heartbeat(self) -> Heartbeat:
        describe_slurm = self.slurm.submission.described if self.slurm is not None else None
        return Heartbeat(identity=self.identity, settings=self.settings, database=self.database,
                         describe_slurm=describe_slurm,
                         send=lambda job_id, spec: enqueue_job(self.celery_app, job_id, spec))

    @cached_property
    def slurm(self) -> SlurmExecutor | None:
        """The Slurm executor of a worker started with `--executor slurm` (else None)."""
        if self.settings.executor != "slurm":
            return None
        return SlurmExecutor(settings=self.settings, database=self.database,
                             identity=self.identity)

    @cached_property
    def warm_launcher(self) -> WarmLauncher | None:
        """The warm launcher of this worker (None with TUNEDECK_WARM_START=false, and on
        a Slurm executor, whose jobs start on the cluster's nodes)."""
        if not self.settings.warm_start or self.settings.executor == "slurm":
            return None
        return WarmLauncher(folder=self.settings.home_dir / "warm" / self.identity.name,
                            environment=standby_environment(), cwd=Path.cwd())

    @cached_property
    def generator(self) -> WarmGenerator:
        """The generation process of this worker's "Try it" requests (started on the first)."""
        return WarmGenerator(settings=self.settings)

    def hand_on(self, job_id: int, worker_name: str) -> None:
        send_to_worker(self.celery_app, job_id, worker_name)

    def start_node(self, job_id: int, node_rank: int, worker_name: str) -> None:
        send_node_to_worker(self.celery_app, job_id, node_rank, worker_name)

    def offer_waiting_jobs(self) -> None:
        """A job here ended and its GPUs are free again: jobs waiting for them get a turn now,
        and so do prompts that waited for a GPU."""
        if not self.shutdown_requested.is_set():
            for waiting_job_id in jobs_to_offer(identity=self.identity, database=self.database):
                self.hand_on(waiting_job_id, self.identity.name)
            self.offer_waiting_generations()

    def offer_waiting_generations(self) -> None:
        with self.database.transaction() as session:
            waiting = GENERATIONS.pending_ids(session=session, worker_name=self.identity.name)
        for generation_id in waiting:
            send_generation(self.celery_app, generation_id, self.identity.name)

    def stop_running_jobs(self) -> None:
        self.shutdown_requested.set()
        self.heartbeat.stop()
        self.generator.stop()
        if self.warm_launcher is not None:
            self.warm_launcher.stop()

    def settle_jobs_at_start(self) -> None:
        """Settle this host's jobs whose worker died, start the heartbeat, then re-send every
        queued job this worker serves: a message lost with a dead worker or a broker restart
        must not strand a job. Duplicates are harmless: only one claim succeeds."""
        serve_worker_metrics(self.settings)
        if self.slurm is not None:
            # Its Slurm jobs ran on without it: follow each again (it has no local launcher).
            self.heartbeat.start()
            for job_id in self.slurm.jobs_to_follow_again():
                self.hand_on(job_id, self.identity.name)
            for job_id in jobs_to_offer(identity=self.identity, database=self.database, limit=1000):
                self.hand_on(job_id, self.identity.name)
            return
        with self.database.transaction() as session:
            settled = settle_jobs_whose_launcher_is_gone(
                session=session, worker_host=self.identity.host, worker_started_at=self.started_at)
        for job_id, spec in settled.to_send:
            enqueue_job(self.celery_app, job_id, spec)
        self.heartbeat.start()
        if self.warm_launcher is not None:
            self.warm_launcher.replenish()
        for job_id in jobs_to_offer(identity=self.identity, database=self.database, limit=1000):
            self.hand_on(job_id, self.identity.name)
        name = self.identity.name
        with self.database.transaction() as session:
            # Nothing would ever settle the requests its previous process was running.
            GENERATIONS.fail_interrupted(
                session=session, worker_name=name,
                error=f"worker {name} stopped while generating; ask again")
            PREFLIGHTS.fail_interrupted(
                session=session, worker_name=name,
                error=f"worker {name} stopped while checking the data; check it again")
        self.offer_waiting_generations()  # their messages may have been lost with the worker


def build_worker(settings: Settings) -> WorkerProcess:
    """The worker of `settings`: its Celery app has the tasks, and Celery's worker signals
    reach it (call once a process: `tunedeck worker` runs one)."""
    worker = WorkerProcess(settings)
    _register_tasks(worker)
    worker_ready.connect(lambda **_kwargs: worker.settle_jobs_at_start(), weak=False)
    worker_shutting_down.connect(lambda **_kwargs: worker.stop_running_jobs(), weak=False)
    return worker


def _register_tasks(worker: WorkerProcess) -> None:
    task = worker.celery_app.task

    @task(name=RUN_JOB_TASK, shared=False)
    def run_job_task(job_id: int) -> str:
        with for_job(job_id):  # every line this thread logs meanwhile names the job
            return _run_job(job_id)

    def _run_job(job_id: int) -> str:
        if worker.slurm is not None:
            return str(worker.slurm.run_job(job_id,
                                            shutdown_requested=worker.shutdown_requested.is_set))
        outcome = run_job(job_id, settings=worker.settings, database=worker.database,
                          shutdown_requested=worker.shutdown_requested.is_set,
                          identity=worker.identity, hand_on=worker.hand_on,
                          start_node=worker.start_node, warm=worker.warm_launcher,
                          claimed_gpus=worker.generator.release_gpus)
        if outcome.job_finished:
            worker.offer_waiting_jobs()
            if worker.warm_launcher is not None and not worker.shutdown_requested.is_set():
                worker.warm_launcher.replenish()  # again, if it died (its jobs with it) meanwhile
        return str(outcome)

    @task(name=RUN_JOB_NODE_TASK, shared=False)
    def run_job_node_task(job_id: int, node_rank: int) -> str:
        with for_job(job_id):
            return _run_job_node(job_id, node_rank)

    def _run_job_node(job_id: int, node_rank: int) -> str:
        worker.generator.release_gpus()  # this node's GPUs were placed for it already
        outcome = run_job_node(job_id, node_rank, settings=worker.settings,
                               database=worker.database, identity=worker.identity,
                               shutdown_requested=worker.shutdown_requested.is_set)
        if outcome != Outcome.NOT_STARTED:
            worker.offer_waiting_jobs()
        return str(outcome)

    @task(name=PREFLIGHT_DATASET_TASK, shared=False)
    def preflight_dataset_task(preflight_id: int) -> str:
        """A few seconds on the worker's spare thread
        (tunedeck.services.broker.PREFLIGHT_THREADS)."""
        return run_dataset_preflight(preflight_id, settings=worker.settings,
                                     database=worker.database, worker_name=worker.identity.name)

    @task(name=GENERATE_TASK, shared=False)
    def generate_task(generation_id: int) -> str:
        """Seconds on the worker's spare thread (as a preflight), never a job's slot."""
        return run_generation(generation_id, settings=worker.settings, database=worker.database,
                              identity=worker.identity, generator=worker.generator)
