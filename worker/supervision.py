"""Supervising one node's launch while it runs: store its ranks' new metric lines and the
worker's samples every poll (kept in memory while the database does not answer), record
its notices, and stop it when the job is cancelled, the worker shuts down, or the job is
no longer this worker's. `worker.launch` launches, `worker.job_runner` judges; this
module watches."""
from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from sqlalchemy.exc import DBAPIError

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database
from tunedeck.metrics import events as metrics_event, samples as sample_store, store as metric_store
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from worker.metrics_tail import MetricsTail
from worker.monitoring.exporter import WORKER_GAUGES
from worker.process_group import JobProcesses
from worker.sampler import JobSampler

log = logging.getLogger(__name__)


@dataclass
class Supervision:
    """What the worker learned while the job ran."""

    cancelled: bool = False
    stopped_by_shutdown: bool = False
    # The sweep gave the job up while we ran it (our heartbeats stopped reaching the
    # database): it is failed or queued for another worker, and its row is not ours.
    taken_away: bool = False
    # What was read from the run folder but not stored yet: the database did not answer.
    # Kept (and retried every poll) until it does, so an outage loses no metric point.
    pending_events: list[tuple[int, dict]] = field(default_factory=list)
    pending_samples: list[dict] = field(default_factory=list)
    database_down_since: float | None = None
    error_notices: list[tuple[float, int, str]] = field(default_factory=list)
    # Per rank, the last line an earlier launch of this job stored (a resumed job's files
    # grow on): its notices are events already, and must not be told twice.
    stored_lines: dict[int, int] = field(default_factory=dict)
    # Whether the latest poll's commit stored metric lines.
    stored_any: bool = False


# Ranks start once: scanning /proc every poll would cost a core's %. Until every rank of
# the node is seen, though, it is scanned every poll: a short job's ranks may live only a few
# seconds, and found 5 s late they would leave a sample or none.
PROCESS_SCAN_SECONDS = 5.0


def supervise(job_id: int, processes: JobProcesses, run: RunFolder, *, settings: Settings,
               database: Database, shutdown_requested: Callable[[], bool],
               sampler: JobSampler | None = None, launch_env: dict[str, str] | None = None,
               worker_name: str | None = None, ranks: range | None = None,
               ranks_on_node: int | None = None,
               on_stored: Callable[[], None] = lambda: None) -> Supervision:
    """Watch the launch until its launcher exits, or stop it (cancel, shutdown, the job
    no longer ours); the returned Supervision says which, and what the ranks reported.
    `ranks_on_node`: how many rank processes to look for (None: look every few seconds).
    `on_stored()` is told after each commit that stored new rows (the trackers' export
    reads them on its own thread; it must return at once)."""
    tail = MetricsTail(run, ranks)
    # The job's own CUDA_VISIBLE_DEVICES: the GPUs it was given, not all of the worker's.
    sampler = sampler or JobSampler.for_launch(host=socket.gethostname(),
                                               launch_env=launch_env or dict(os.environ))
    with database.transaction() as session:
        supervision = Supervision(stored_lines=metric_store.last_seq_by_rank(session=session,
                                                                             job_id=job_id))
    with WORKER_GAUGES.supervising(job_id):
        return _watch(job_id, processes, tail, supervision, sampler, settings=settings,
                      database=database, shutdown_requested=shutdown_requested,
                      worker_name=worker_name, ranks_on_node=ranks_on_node,
                      on_stored=on_stored)


def _watch(job_id: int, processes: JobProcesses, tail: MetricsTail, supervision: Supervision,
           sampler: JobSampler, *, settings: Settings, database: Database,
           shutdown_requested: Callable[[], bool], worker_name: str | None,
           ranks_on_node: int | None, on_stored: Callable[[], None]) -> Supervision:
    last_scan = time.monotonic()
    while True:
        finished = processes.launcher.poll() is not None
        looking = ranks_on_node is not None and sampler.ranks_seen() < ranks_on_node
        if looking or time.monotonic() - last_scan > PROCESS_SCAN_SECONDS:
            processes.refresh()
            last_scan = time.monotonic()
        samples = sampler.sample_if_due(processes.known_pids())  # at most once a second
        cancel_requested, ours = _ingest_and_read_control(job_id, tail, supervision,
                                                          database=database, samples=samples,
                                                          worker_name=worker_name)
        if samples or supervision.stored_any:
            on_stored()
        if finished:
            _drain(job_id, tail, supervision, database=database, worker_name=worker_name)
            return supervision
        if cancel_requested or shutdown_requested() or not ours:
            supervision.taken_away = not ours
            supervision.cancelled = cancel_requested and ours
            supervision.stopped_by_shutdown = not cancel_requested and ours
            processes.stop(grace_seconds=settings.cancel_grace_seconds)
            _drain(job_id, tail, supervision, database=database, worker_name=worker_name)
            return supervision
        time.sleep(settings.poll_seconds)


# How long a finished job's worker keeps retrying a database that does not answer, to
# store the last lines and the outcome, before it gives up (and logs what it could not store).
DATABASE_RETRY_SECONDS = 600.0
DATABASE_RETRY_INTERVAL = 2.0


def _drain(job_id: int, tail: MetricsTail, supervision: Supervision, *, database: Database,
           worker_name: str | None) -> None:
    """Store the job's last lines, waiting out a database outage."""
    deadline = time.monotonic() + DATABASE_RETRY_SECONDS
    _ingest_and_read_control(job_id, tail, supervision, database=database, worker_name=worker_name)
    while supervision.database_down_since is not None and time.monotonic() < deadline:
        time.sleep(DATABASE_RETRY_INTERVAL)
        _ingest_and_read_control(job_id, tail, supervision, database=database,
                                 worker_name=worker_name)
    if supervision.pending_events:
        log.error("job %s: %d metric lines could not be stored; they stay in %s", job_id,
                  len(supervision.pending_events), tail.run_path)


# Samples are a view of the moment; while the database is away only the newest are kept
# (about ten minutes of one GPU host). Metric lines are all kept.
MAX_PENDING_SAMPLES = 10_000


def _ingest_and_read_control(job_id: int, tail: MetricsTail, supervision: Supervision, *,
                             database: Database, samples: list[dict] = (),
                             worker_name: str | None = None) -> tuple[bool, bool]:
    """One transaction a poll: store the new metric lines and samples (and any left from
    polls the database did not answer), read whether the job is to be cancelled and
    whether it is still ours. With the database away, the job runs on and the lines wait."""
    supervision.pending_events.extend(tail.read_new_events())
    supervision.pending_samples.extend(samples)
    del supervision.pending_samples[:-MAX_PENDING_SAMPLES]
    events = supervision.pending_events
    try:
        with database.transaction() as session:
            sample_store.add_samples(session=session, job_id=job_id,
                                     samples=supervision.pending_samples)
            if events:  # idempotent per (rank, line): a retried batch is stored once
                metric_store.add_metric_points(session=session, job_id=job_id, events=events)
            fresh = [event for seq, event in events
                     if seq > supervision.stored_lines.get(event["rank"], -1)]
            error_notices = [_record_notice(job_id, event, session=session)
                             for event in fresh if event["kind"] == metrics_event.NOTICE]
            for event in fresh:
                if event["kind"] == metrics_event.PHASE:
                    _record_phase_edge(job_id, event, session=session)
            control = job_queries.run_control(session=session, job_id=job_id,
                                            worker_name=worker_name)
    except DBAPIError as error:
        WORKER_GAUGES.pending(job_id, len(events))
        if supervision.database_down_since is None:
            supervision.database_down_since = time.monotonic()
            log.warning("job %s: the database did not answer (%s); keeping its metric lines "
                        "until it does", job_id, error.__class__.__name__)
        return False, True
    if supervision.database_down_since is not None:
        log.warning("job %s: the database is back after %.0f s; %d buffered lines stored",
                    job_id, time.monotonic() - supervision.database_down_since, len(events))
        supervision.database_down_since = None
    supervision.stored_any = bool(events)
    WORKER_GAUGES.stored(job_id, events)
    supervision.error_notices.extend(notice for notice in error_notices if notice is not None)
    supervision.pending_events, supervision.pending_samples = [], []
    return control


def _record_phase_edge(job_id: int, event: dict, *, session) -> None:
    """A phase's start and end become job events (its progress lines stay metric points:
    the page's bar reads the newest); a rank's own, for the first rank of a node tokenizes."""
    if event.get("state") in (metrics_event.PHASE_START, metrics_event.PHASE_END,
                              metrics_event.PHASE_FAILED):
        job_store.add_job_event(session=session, job_id=job_id, kind="phase",
                                message=f"rank {event['rank']}: {metrics_event.phase_text(event)}")


def _record_notice(job_id: int, event: dict, *, session) -> tuple[float, int, str] | None:
    """Store a notice as a job event; an error notice is also returned, for the triage."""
    message = str(event.get("message", ""))
    if event.get("level") == "error":
        job_store.add_job_event(session=session, job_id=job_id, kind="error",
                                message=f"rank {event['rank']}: {message}")
        return event["time"], event["rank"], message
    if event["rank"] == 0:
        job_store.add_job_event(session=session, job_id=job_id, kind="notice", message=message)
    return None
