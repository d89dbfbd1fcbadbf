"""Runs one job: claim the row, check inputs, write the run folder, launch torchrun,
stream its metrics into the database, obey cancel, and record how it ended.

Plain functions of a job id, a Settings and a Database: the Celery task only calls `run_job`.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sqlalchemy.exc import DBAPIError

from tunedeck import job_store
from tunedeck.backend_config import backend_config, build_torchrun_argv
from tunedeck.db.engine import Database
from tunedeck.failure_kinds import COMM_TIMEOUT, ERROR
from tunedeck.job_spec import JobSpec
from tunedeck.job_states import InvalidTransition
from tunedeck.run_folder import RunFolder, write_run_folder
from tunedeck.settings import Settings
from tunedeck.torch_extensions import environment_extensions_dir
from worker.failure_triage import FailureEvidence, FailureReason, classify_failure, describe_failure
from worker.input_check import find_input_problems, worker_input_roots
from worker.job_claim import Claim, claim_job
from worker.supervision import (DATABASE_RETRY_INTERVAL, DATABASE_RETRY_SECONDS, Supervision,
                                _supervise)
from worker.process_group import JobProcesses, start_process_group
from worker.warm_launcher import WarmLauncher, fits_warm_start
from worker.worker_identity import WorkerIdentity

log = logging.getLogger(__name__)
LOG_TAIL_LINES = 30
# torchrun's failure report alone is ~20 lines; the ranks' tracebacks come before it.
TRIAGE_LOG_LINES = 300


@dataclass
class JobOutcome:
    status: str
    error: str | None = None
    failure: FailureReason | None = None  # why it failed, for the row and the "Retry with…"


def never() -> bool:
    return False


@dataclass(frozen=True)
class NodePlace:
    """Which node of its job a launch is, where node 0 hosts the rendezvous (jobs on
    several nodes), and the CUDA_VISIBLE_DEVICES of the GPUs it was given (None: no GPU)."""

    node_rank: int = 0
    rendezvous: str | None = None
    visible_devices: str | None = None


def run_job(job_id: int, *, settings: Settings, database: Database,
            shutdown_requested: Callable[[], bool] = never,
            identity: WorkerIdentity | None = None,
            hand_on: Callable[[int, str], None] | None = None,
            start_node: Callable[[int, int, str], None] | None = None,
            warm: WarmLauncher | None = None) -> str:
    """Run a queued job to its end; returns its final status (or its current one if it
    was not ours to run: already claimed, cancelled, finished, or waiting for GPUs).
    A job this worker has no room for goes to `hand_on(job_id, worker_name)` when another
    worker has. Of a job on several nodes this worker runs node 0 and tells the workers of
    the others through `start_node(job_id, node_rank, worker_name)`. When
    `shutdown_requested()` turns true, the job is stopped and marked failed. With `warm`,
    a job that fits starts on its standby launcher (worker/warm_launcher.py)."""
    identity = identity or WorkerIdentity.from_settings(settings)
    run = RunFolder(settings.run_dir_for(job_id))
    claim = claim_job(job_id, identity=identity, database=database, run_dir=str(run.path),
                      worker_lost_seconds=settings.worker_lost_seconds)
    if claim.spec is None:
        if claim.hand_on_to and hand_on is not None:
            hand_on(job_id, claim.hand_on_to)
        log.info("not running job %s here: %s%s", job_id, claim.status,
                 f" (handed on to {claim.hand_on_to})" if claim.hand_on_to else "")
        return claim.status
    for node_rank, worker_name in claim.followers:
        if start_node is not None:
            start_node(job_id, node_rank, worker_name)
    outcome = _launch_and_supervise(job_id, claim, run, identity=identity, settings=settings,
                                    database=database, shutdown_requested=shutdown_requested,
                                    warm=warm)
    if outcome.status != "taken_away":
        _record_outcome(job_id, outcome, database=database)
    return outcome.status


def _launch_and_supervise(job_id: int, claim: Claim, run: RunFolder, *,
                          identity: WorkerIdentity, settings: Settings, database: Database,
                          shutdown_requested: Callable[[], bool],
                          warm: WarmLauncher | None = None) -> JobOutcome:
    spec = claim.spec
    assert spec is not None
    problems = find_input_problems(
        spec, allowed_roots=worker_input_roots(settings, claim.owner),
        datasets_cache=settings.datasets_cache_dir)
    if problems:
        return JobOutcome("failed", "\n".join(problems),
                          classify_failure(FailureEvidence(input_problems=tuple(problems))))
    place = NodePlace(rendezvous=claim.rendezvous,
                      visible_devices=_visible_devices(identity, claim.gpus))
    try:
        returncode, supervision = launch_node(job_id, spec, run, place, resume=claim.resume,
                                              settings=settings, database=database,
                                              shutdown_requested=shutdown_requested,
                                              worker_name=identity.name, warm=warm)
    except OSError as error:
        return JobOutcome("failed", f"could not start torchrun: {error}", FailureReason(ERROR))
    if supervision.taken_away:
        return JobOutcome("taken_away")
    outcome = _judge(returncode, supervision, run)
    if outcome.status == "failed" and spec.num_nodes > 1:
        return _blame_missing_nodes(job_id, outcome, settings=settings, database=database)
    return outcome


def launch_node(job_id: int, spec: JobSpec, run: RunFolder, place: NodePlace, *, resume: bool,
                settings: Settings, database: Database, shutdown_requested: Callable[[], bool],
                worker_name: str | None, warm: WarmLauncher | None = None
                ) -> tuple[int | None, Supervision]:
    """Start this node's torchrun (on the standby launcher of `warm` when the job fits one)
    and supervise it to its end: (its exit code, what the supervision learned). Raises
    OSError when torchrun cannot start."""
    argv, env = _prepare_run_folder(spec, run, settings, resume=resume, place=place,
                                    job_id=job_id)
    log_file = run.node_launcher_log_file(place.node_rank)
    # The worker's own folder, so relative model and dataset paths mean what the check saw.
    process = warm.take(argv, cwd=Path.cwd(), env=env, log_file=log_file) \
        if warm is not None and fits_warm_start(spec) else None
    if process is None:
        process = start_process_group(argv, cwd=Path.cwd(), env=env, log_file=log_file)
    if place.node_rank == 0:
        with database.transaction() as session:
            job_store.record_launcher_pid(session=session, job_id=job_id, launcher_pid=process.pid)
    processes = JobProcesses(process)
    # Static rendezvous: node K holds ranks K*N .. K*N+N-1; it stores its own ranks' lines.
    own_ranks = range(place.node_rank * spec.num_gpus, (place.node_rank + 1) * spec.num_gpus)
    try:
        supervision = _supervise(job_id, processes, run, settings=settings, database=database,
                                 shutdown_requested=shutdown_requested, launch_env=env,
                                 worker_name=worker_name,
                                 ranks=own_ranks if spec.num_nodes > 1 else None)
    finally:
        processes.kill()  # nothing of the job outlives its supervision
    return process.returncode, supervision


def _blame_missing_nodes(job_id: int, outcome: JobOutcome, *, settings: Settings,
                         database: Database) -> JobOutcome:
    """A job on several nodes that failed while a node never started: say which, since
    node 0's own log only shows the rendezvous timing out."""
    with database.transaction() as session:
        missing = [node for node in job_store.list_job_nodes(session=session, job_id=job_id)
                   if node.state == job_store.NODE_ASSIGNED]
    if not missing:
        return outcome
    names = ", ".join(f"node {node.node_rank} (worker {node.worker_name} on {node.host})"
                      for node in missing)
    error = (f"{names} did not start within {settings.node_start_timeout_seconds:g} s, so "
             "the job's nodes gave up waiting for each other; is that worker running and "
             "reaching the database?")
    return JobOutcome("failed", error, FailureReason(COMM_TIMEOUT))


def _visible_devices(identity: WorkerIdentity, gpus: list[int] | None) -> str | None:
    """The CUDA_VISIBLE_DEVICES of a job holding `gpus` (None on a host without GPUs)."""
    if identity.gpu_ids is None or not gpus:
        return None
    return identity.cuda_visible_devices(gpus)


def _prepare_run_folder(spec: JobSpec, run: RunFolder, settings: Settings, *, resume: bool,
                        place: NodePlace = NodePlace(), job_id: int | None = None):
    """Write spec, config and launch record. A resumed job keeps its folder's checkpoints,
    metrics and logs: the trainer continues from the latest checkpoint, and each rank's
    metrics file grows on, so no point is ingested twice."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        torchrun = shutil.which("torchrun") or "torchrun"
    argv = build_torchrun_argv(spec, str(run.path), torchrun=torchrun, resume=resume,
                               node_rank=place.node_rank, rendezvous=place.rendezvous,
                               job_id=job_id,
                               start_timeout_seconds=settings.node_start_timeout_seconds)
    launch_env = _launch_environment(spec, settings)
    if place.visible_devices is not None:  # its GPUs only: other jobs here hold the others
        launch_env["CUDA_VISIBLE_DEVICES"] = place.visible_devices
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec), node_rank=place.node_rank,
                     launch={"argv": argv, "env": launch_env, "cwd": str(Path.cwd())})
    return argv, {**_inherited_environment(), **launch_env}


def _launch_environment(spec: JobSpec, settings: Settings) -> dict[str, str]:
    """What TuneDeck sets for the ranks; recorded in launch.json, so never a secret."""
    threads_per_rank = max(1, (os.cpu_count() or 1) // spec.num_gpus)
    return {
        "TUNEDECK_HOME": str(settings.home_dir),
        # This worker's Python runs the ranks: its own build folder (tunedeck/torch_extensions).
        "TORCH_EXTENSIONS_DIR": str(environment_extensions_dir(settings.torch_extensions_dir)),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads_per_rank)),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Where the input check prepared the dataset: the ranks read it, not prepare it again.
        "HF_DATASETS_CACHE": str(settings.datasets_cache_dir),
    }


def standby_environment() -> dict[str, str]:
    """What a standby launcher starts with (it takes on its job's environment later)."""
    return {**_inherited_environment(), "PYTHONUNBUFFERED": "1"}


def _inherited_environment() -> dict[str, str]:
    # Ranks need PATH, CUDA_* and the like, and HF_TOKEN for gated models (never written
    # down: launch.json holds `_launch_environment` only), but not our database or broker
    # credentials: no TUNEDECK_* URL, nor compose's POSTGRES_PASSWORD (its .env reaches the
    # worker's container).
    return {key: value for key, value in os.environ.items()
            if not key.startswith("TUNEDECK_") and key != "POSTGRES_PASSWORD"}


def _judge(returncode: int | None, supervision: Supervision, run: RunFolder) -> JobOutcome:
    if supervision.cancelled:
        return JobOutcome("cancelled")
    if returncode == 0 and run.merged_dir.is_dir() and not supervision.stopped_by_shutdown:
        return JobOutcome("succeeded")
    failure = classify_failure(FailureEvidence(
        stopped_by_shutdown=supervision.stopped_by_shutdown, returncode=returncode,
        error_notices=tuple(supervision.error_notices),
        log_tail=read_log_tail(run, TRIAGE_LOG_LINES)))
    return JobOutcome("failed", _failure_text(returncode, supervision, run, failure), failure)


def _failure_text(returncode: int | None, supervision: Supervision, run: RunFolder,
                  failure: FailureReason) -> str:
    if supervision.stopped_by_shutdown:
        return (f"the worker on {socket.gethostname()} was shut down while the job ran; the "
                "job's processes were stopped")
    if supervision.error_notices:
        # The notice of the rank the triage blames (a peer's timeout may come earlier),
        # else the first by time.
        blamed = [notice for notice in supervision.error_notices if notice[1] == failure.rank]
        _time, rank, message = min(blamed or supervision.error_notices)
        return f"rank {rank}: {message}"
    if returncode == 0:
        return "the trainer exited without writing merged/"
    return f"torchrun exited with code {returncode}\n" + read_log_tail(run)


def read_log_tail(run: RunFolder, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = run.launcher_log_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _record_outcome(job_id: int, outcome: JobOutcome, *, database: Database) -> None:
    """Store how the job ended, waiting out a database outage (the row is the record)."""
    deadline = time.monotonic() + DATABASE_RETRY_SECONDS
    while True:
        try:
            return _store_outcome(job_id, outcome, database=database)
        except DBAPIError:
            if time.monotonic() > deadline:
                raise
            log.warning("job %s: the database did not answer; retrying its outcome", job_id)
            time.sleep(DATABASE_RETRY_INTERVAL)


def _store_outcome(job_id: int, outcome: JobOutcome, *, database: Database) -> None:
    with database.transaction() as session:
        try:
            if outcome.status == "succeeded":
                job_store.mark_job_succeeded(session=session, job_id=job_id)
            elif outcome.status == "cancelled":
                job_store.mark_job_cancelled(session=session, job_id=job_id)
            else:
                failure = outcome.failure or FailureReason(ERROR)
                job_store.mark_job_failed(session=session, job_id=job_id, error=outcome.error or "",
                                          failure_kind=failure.kind, failed_rank=failure.rank)
                job_store.add_job_event(session=session, job_id=job_id, kind="failure",
                                        message=describe_failure(failure))
        except InvalidTransition as reason:
            log.warning("job %s: %s", job_id, reason)
