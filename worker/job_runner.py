"""Runs one job: claim the row, check inputs, launch its node 0 (worker/launch.py: run
folder, torchrun, supervision), judge how it ended and record that on the row.

Plain functions of a job id, a Settings and a Database: the Celery task only calls `run_job`.
"""
from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, replace
from typing import Callable

from sqlalchemy.exc import DBAPIError

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database
from tunedeck.jobs.failure_kinds import COMM_TIMEOUT, DISK_FULL, ERROR
from tunedeck.jobs.states import NODE_ASSIGNED, InvalidTransition
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from worker.disk_room import DiskRoom, clear_half_checkpoints, free_bytes_under
from worker.failure_triage import FailureEvidence, FailureReason, classify_failure, describe_failure
from worker.input_check import find_input_problems, trainer_inputs, worker_input_roots
from worker.job_claim import Claim, claim_job
from worker.launch import NodeLaunch, launch_node, never
from worker.outcome import Outcome
from worker.supervision import DATABASE_RETRY_INTERVAL, DATABASE_RETRY_SECONDS, Supervision
from worker.trackers.export import TrackerExport
from worker.warm_launcher import WarmLauncher
from worker.worker_identity import WorkerIdentity

log = logging.getLogger(__name__)
LOG_TAIL_LINES = 30
# torchrun's failure report alone is ~20 lines; the ranks' tracebacks come before it.
TRIAGE_LOG_LINES = 300


@dataclass
class RunResult:
    """How a run of the job here ended, and for a failure, why."""

    outcome: Outcome
    error: str | None = None
    failure: FailureReason | None = None  # why it failed, for the row and the "Retry with…"


def run_job(job_id: int, *, settings: Settings, database: Database,
            shutdown_requested: Callable[[], bool] = never,
            identity: WorkerIdentity | None = None,
            hand_on: Callable[[int, str], None] | None = None,
            start_node: Callable[[int, int, str], None] | None = None,
            warm: WarmLauncher | None = None,
            claimed_gpus: Callable[[str | None], None] | None = None) -> Outcome:
    """Run a queued job to its end; returns how it ended (or, if it was not ours to run,
    why: missing, already claimed, cancelled, finished, or waiting for GPUs).
    A job this worker has no room for goes to `hand_on(job_id, worker_name)` when another
    worker has. Of a job on several nodes this worker runs node 0 and tells the workers of
    the others through `start_node(job_id, node_rank, worker_name)`. When
    `shutdown_requested()` turns true, the job is stopped and marked failed. With `warm`,
    a job that fits is forked by its warm launcher (worker/warm_launcher.py).
    `claimed_gpus(cuda_visible_devices)` hears which GPUs the job took, before it launches
    (the worker's generation process gives them up)."""
    identity = identity or WorkerIdentity.from_settings(settings)
    run = RunFolder(settings.run_dir_for(job_id))
    claim = claim_job(job_id, identity=identity, database=database, run_dir=str(run.path),
                      worker_lost_seconds=settings.worker_lost_seconds,
                      disk_room=DiskRoom.of(settings))
    if claim.spec is None:
        outcome = Outcome.of_unclaimed(claim.status)
        if claim.hand_on_to and hand_on is not None:
            hand_on(job_id, claim.hand_on_to)
        log.info("not running job %s here: %s%s", job_id, outcome,
                 f" (handed on to {claim.hand_on_to})" if claim.hand_on_to else "")
        return outcome
    for node_rank, worker_name in claim.followers:
        if start_node is not None:
            start_node(job_id, node_rank, worker_name)
    launch = NodeLaunch(job_id=job_id, spec=claim.spec, run=run, resume=claim.resume,
                        rendezvous=claim.rendezvous,
                        visible_devices=identity.cuda_visible_devices(claim.gpus),
                        worker_name=identity.name)
    if claimed_gpus is not None and launch.visible_devices:
        claimed_gpus(launch.visible_devices)
    log.info("job %s: starting %d rank(s) of %s on %s (GPUs %s)", job_id, claim.spec.num_gpus,
             claim.spec.backend, identity.host, launch.visible_devices or "none: CPU ranks")
    export = TrackerExport.for_job(job_id, claim.spec, run, settings=settings,
                                   database=database).start()
    outcome = Outcome.FAILED  # what the trackers are told if the worker itself raises
    try:
        result = _launch_and_judge(launch, claim, settings=settings, database=database,
                                   shutdown_requested=shutdown_requested, warm=warm,
                                   on_stored=export.nudge)
        outcome = result.outcome
        if result.outcome != Outcome.TAKEN_AWAY:
            record_outcome(job_id, result, database=database)
    finally:
        # After the row is recorded: the job's outcome never waits on a tracker.
        export.finish(outcome)
    log.info("job %s: %s%s", job_id, result.outcome,
             f" ({result.failure.kind})" if result.failure else "")
    return result.outcome


def _launch_and_judge(launch: NodeLaunch, claim: Claim, *, settings: Settings,
                      database: Database, shutdown_requested: Callable[[], bool],
                      warm: WarmLauncher | None = None,
                      on_stored: Callable[[], None] = lambda: None) -> RunResult:
    inputs = trainer_inputs(launch.spec, database=database, settings=settings)
    launch = replace(launch, spec=inputs.spec)
    problems = [inputs.problem] if inputs.problem else find_input_problems(
        launch.spec, allowed_roots=(*worker_input_roots(settings, claim.owner), *inputs.extra_roots),
        datasets_cache=settings.datasets_cache_dir)
    if problems:
        return RunResult(Outcome.FAILED, "\n".join(problems),
                         classify_failure(FailureEvidence(input_problems=tuple(problems))))
    try:
        returncode, supervision = launch_node(launch, settings=settings, database=database,
                                              shutdown_requested=shutdown_requested, warm=warm,
                                              on_stored=on_stored)
    except OSError as error:  # the run folder could not be written (a full disk?), or exec
        return judge_launch_error(error, launch.run)
    if supervision.taken_away:
        return RunResult(Outcome.TAKEN_AWAY)
    result = judge_run(returncode, supervision, launch.run)
    if result.outcome == Outcome.FAILED and launch.spec.num_nodes > 1:
        return _blame_missing_nodes(launch.job_id, result, settings=settings, database=database)
    return result


def _blame_missing_nodes(job_id: int, result: RunResult, *, settings: Settings,
                         database: Database) -> RunResult:
    """A job on several nodes that failed while a node never started: say which, since
    node 0's own log only shows the rendezvous timing out."""
    with database.transaction() as session:
        missing = [node for node in job_queries.list_job_nodes(session=session, job_id=job_id)
                   if node.state == NODE_ASSIGNED]
    if not missing:
        return result
    names = ", ".join(f"node {node.node_rank} (worker {node.worker_name} on {node.host})"
                      for node in missing)
    error = (f"{names} did not start within {settings.node_start_timeout_seconds:g} s, so "
             "the job's nodes gave up waiting for each other; is that worker running and "
             "reaching the database?")
    return RunResult(Outcome.FAILED, error, FailureReason(COMM_TIMEOUT))


def judge_launch_error(error: OSError, run: RunFolder) -> RunResult:
    """The job could not be launched: its run folder could not be written (a full disk
    says so by name) or torchrun could not be started."""
    failure = classify_failure(FailureEvidence(log_tail=str(error), run_dir=str(run.path),
                                               free_bytes=free_bytes_under(run.path)))
    text = f"could not start torchrun: {error}"
    if failure.kind == DISK_FULL:
        return RunResult(Outcome.FAILED, f"{failure.detail}\n{text}", failure)
    return RunResult(Outcome.FAILED, text, FailureReason(ERROR))


def judge_run(returncode: int | None, supervision: Supervision, run: RunFolder) -> RunResult:
    if supervision.cancelled:
        return RunResult(Outcome.CANCELLED)
    if returncode == 0 and run.merged_dir.is_dir() and not supervision.stopped_by_shutdown:
        return RunResult(Outcome.SUCCEEDED)
    failure = classify_failure(FailureEvidence(
        stopped_by_shutdown=supervision.stopped_by_shutdown, returncode=returncode,
        error_notices=tuple(supervision.error_notices),
        log_tail=read_log_tail(run, TRIAGE_LOG_LINES), run_dir=str(run.path),
        free_bytes=free_bytes_under(run.path)))
    text = _failure_text(returncode, supervision, run, failure)
    if failure.kind == DISK_FULL:
        clear_half_checkpoints(run)  # measured first: the detail gives the room it left
        text = f"{failure.detail}\n{text}"  # first, over torch's words that never say it
    return RunResult(Outcome.FAILED, text, failure)


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


def record_outcome(job_id: int, result: RunResult, *, database: Database) -> None:
    """Store how the job ended, waiting out a database outage (the row is the record)."""
    deadline = time.monotonic() + DATABASE_RETRY_SECONDS
    while True:
        try:
            return _store_outcome(job_id, result, database=database)
        except DBAPIError:
            if time.monotonic() > deadline:
                raise
            log.warning("job %s: the database did not answer; retrying its outcome", job_id)
            time.sleep(DATABASE_RETRY_INTERVAL)


def _store_outcome(job_id: int, result: RunResult, *, database: Database) -> None:
    with database.transaction() as session:
        try:
            if result.outcome == Outcome.SUCCEEDED:
                job_store.mark_job_succeeded(session=session, job_id=job_id)
            elif result.outcome == Outcome.CANCELLED:
                job_store.mark_job_cancelled(session=session, job_id=job_id)
            else:
                failure = result.failure or FailureReason(ERROR)
                job_store.mark_job_failed(session=session, job_id=job_id, error=result.error or "",
                                          failure_kind=failure.kind, failed_rank=failure.rank)
                job_store.add_job_event(session=session, job_id=job_id, kind="failure",
                                        message=describe_failure(failure))
        except InvalidTransition as reason:
            log.warning("job %s: %s", job_id, reason)
