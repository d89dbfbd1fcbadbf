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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tunedeck import job_store, metric_store, metrics_event, sample_store
from tunedeck.backend_config import backend_config, build_torchrun_argv
from tunedeck.db.engine import Database
from tunedeck.failure_kinds import ERROR
from tunedeck.job_spec import JobSpec
from tunedeck.job_states import InvalidTransition
from tunedeck.run_folder import RunFolder, write_run_folder
from tunedeck.settings import Settings
from worker.failure_triage import FailureEvidence, FailureReason, classify_failure, describe_failure
from worker.input_check import find_input_problems
from worker.metrics_tail import MetricsTail
from worker.process_group import JobProcesses, start_process_group
from worker.sampler import JobSampler

log = logging.getLogger(__name__)
LOG_TAIL_LINES = 30
# torchrun's failure report alone is ~20 lines; the ranks' tracebacks come before it.
TRIAGE_LOG_LINES = 300


@dataclass
class JobOutcome:
    status: str
    error: str | None = None
    failure: FailureReason | None = None  # why it failed, for the row and the "Retry with…"


@dataclass
class Supervision:
    """What the worker learned while the job ran."""

    cancelled: bool = False
    stopped_by_shutdown: bool = False
    error_notices: list[tuple[float, int, str]] = field(default_factory=list)
    # Per rank, the last line an earlier launch of this job stored (a resumed job's files
    # grow on): its notices are events already, and must not be told twice.
    stored_lines: dict[int, int] = field(default_factory=dict)


def never() -> bool:
    return False


def run_job(job_id: int, *, settings: Settings, database: Database,
            shutdown_requested: Callable[[], bool] = never) -> str:
    """Run a queued job to its end; returns its final status (or its current one if it
    was not ours to run: already claimed, cancelled, or finished). When
    `shutdown_requested()` turns true, the job is stopped and marked failed."""
    run = RunFolder(settings.run_dir_for(job_id))
    try:
        with database.transaction() as session:
            job = job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                             worker_host=socket.gethostname())
            spec = JobSpec.model_validate(job.spec)
            resume = job.resume_requested
    except (InvalidTransition, job_store.JobNotFound) as reason:
        log.info("not running job %s: %s", job_id, reason)
        return getattr(reason, "current", "missing")
    outcome = _launch_and_supervise(job_id, spec, run, settings=settings, database=database,
                                    shutdown_requested=shutdown_requested, resume=resume)
    _record_outcome(job_id, outcome, database=database)
    return outcome.status


def _launch_and_supervise(job_id: int, spec: JobSpec, run: RunFolder, *, settings: Settings,
                          database: Database, shutdown_requested: Callable[[], bool],
                          resume: bool = False) -> JobOutcome:
    problems = find_input_problems(spec)
    if problems:
        return JobOutcome("failed", "\n".join(problems),
                          classify_failure(FailureEvidence(input_problems=tuple(problems))))
    try:
        argv, env = _prepare_run_folder(spec, run, settings, resume=resume)
        # The worker's own folder, so relative model and dataset paths mean what the check saw.
        process = start_process_group(argv, cwd=Path.cwd(), env=env, log_file=run.launcher_log_file)
    except OSError as error:
        return JobOutcome("failed", f"could not start torchrun: {error}", FailureReason(ERROR))
    with database.transaction() as session:
        job_store.record_launcher_pid(session=session, job_id=job_id, launcher_pid=process.pid)
    processes = JobProcesses(process)
    try:
        supervision = _supervise(job_id, processes, run, settings=settings, database=database,
                                 shutdown_requested=shutdown_requested)
    finally:
        processes.kill()  # nothing of the job outlives its supervision
    return _judge(process.returncode, supervision, run)


def _prepare_run_folder(spec: JobSpec, run: RunFolder, settings: Settings, *, resume: bool):
    """Write spec, config and launch record. A resumed job keeps its folder's checkpoints,
    metrics and logs: the trainer continues from the latest checkpoint, and each rank's
    metrics file grows on, so no point is ingested twice."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        torchrun = shutil.which("torchrun") or "torchrun"
    argv = build_torchrun_argv(spec, str(run.path), torchrun=torchrun, resume=resume)
    launch_env = _launch_environment(spec, settings)
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec),
                     launch={"argv": argv, "env": launch_env, "cwd": str(Path.cwd())})
    return argv, {**_inherited_environment(), **launch_env}


def _launch_environment(spec: JobSpec, settings: Settings) -> dict[str, str]:
    """What TuneDeck sets for the ranks; recorded in launch.json, so never a secret."""
    threads_per_rank = max(1, (os.cpu_count() or 1) // spec.num_gpus)
    return {
        "TUNEDECK_HOME": str(settings.home_dir),
        "TORCH_EXTENSIONS_DIR": str(settings.torch_extensions_dir),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads_per_rank)),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _inherited_environment() -> dict[str, str]:
    # Ranks need PATH, CUDA_* and the like, but not our database or broker credentials.
    return {key: value for key, value in os.environ.items() if not key.startswith("TUNEDECK_")}


PROCESS_SCAN_SECONDS = 5.0  # ranks start once; scanning /proc every poll would cost a core's %


def _supervise(job_id: int, processes: JobProcesses, run: RunFolder, *, settings: Settings,
               database: Database, shutdown_requested: Callable[[], bool],
               sampler: JobSampler | None = None) -> Supervision:
    tail = MetricsTail(run)
    # The launch environment is ours plus TuneDeck's keys, so its CUDA_VISIBLE_DEVICES is ours.
    sampler = sampler or JobSampler.for_launch(host=socket.gethostname(), launch_env=dict(os.environ))
    with database.transaction() as session:
        supervision = Supervision(stored_lines=metric_store.last_seq_by_rank(session=session,
                                                                             job_id=job_id))
    last_scan = time.monotonic()
    while True:
        finished = processes.launcher.poll() is not None
        if time.monotonic() - last_scan > PROCESS_SCAN_SECONDS:
            processes.refresh()
            last_scan = time.monotonic()
        samples = sampler.sample_if_due(processes.known_pids())  # at most once a second
        cancel_requested = _ingest_and_read_cancel_flag(job_id, tail, supervision, database=database,
                                                        samples=samples)
        if finished:
            return supervision
        if cancel_requested or shutdown_requested():
            supervision.cancelled = cancel_requested
            supervision.stopped_by_shutdown = not cancel_requested
            processes.stop(grace_seconds=settings.cancel_grace_seconds)
            _ingest_and_read_cancel_flag(job_id, tail, supervision, database=database)
            return supervision
        time.sleep(settings.poll_seconds)


def _ingest_and_read_cancel_flag(job_id: int, tail: MetricsTail, supervision: Supervision, *,
                                 database: Database, samples: list[dict] = ()) -> bool:
    """One transaction a poll: store the new metric lines and samples, read the cancel flag."""
    events = tail.read_new_events()
    with database.transaction() as session:
        sample_store.add_samples(session=session, job_id=job_id, samples=samples)
        if events:
            metric_store.add_metric_points(session=session, job_id=job_id, events=events)
        for seq, event in events:
            already_told = seq <= supervision.stored_lines.get(event["rank"], -1)
            if event["kind"] == metrics_event.NOTICE and not already_told:
                _record_notice(job_id, event, supervision, session=session)
        return job_store.is_cancel_requested(session=session, job_id=job_id)


def _record_notice(job_id: int, event: dict, supervision: Supervision, *, session) -> None:
    message = str(event.get("message", ""))
    if event.get("level") == "error":
        supervision.error_notices.append((event["time"], event["rank"], message))
        job_store.add_job_event(session=session, job_id=job_id, kind="error",
                                message=f"rank {event['rank']}: {message}")
    elif event["rank"] == 0:
        job_store.add_job_event(session=session, job_id=job_id, kind="notice", message=message)


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
