"""The sweep every worker (and the web) runs every few seconds, so no failure of a part
strands a job: running jobs of a worker whose heartbeats stopped are given up (failed as
"worker lost", or queued again when their spec allows restarts), and queued jobs that no
worker claimed for a while are sent to the broker again. Only database rows change here;
the caller sends the returned ids after the transaction commits."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

from prometheus_client import Counter
from sqlalchemy import false, update
from sqlalchemy.orm import Session

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.engine import Database
from tunedeck.db.models import Job, StoredSpecInvalid, Worker, utc_now
from tunedeck.jobs.failure_kinds import INPUT_ERROR, WORKER_LOST
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings

log = logging.getLogger(__name__)
Send = Callable[[int, JobSpec], None]

# Each lost worker is claimed by exactly one sweeping process (the web or a worker), which
# counts it: the cluster's total is the sum over the web's and the workers' /metrics.
# Unregistered: each process's /metrics registry takes it.
LOST_WORKERS_COLLECTOR = Counter(
    "tunedeck_lost_workers", "workers this process declared lost (no heartbeat for "
    "TUNEDECK_WORKER_LOST_SECONDS)", registry=None)


@dataclass
class SweepResult:
    lost_workers: list[str] = field(default_factory=list)
    failed_jobs: list[int] = field(default_factory=list)
    # (job id, its spec) to send to the broker once the transaction commits
    to_send: list[tuple[int, JobSpec]] = field(default_factory=list)


def sweep_cluster(*, session: Session, worker_lost_seconds: float, redispatch_seconds: float,
                  settle_lost: bool = True) -> SweepResult:
    result = SweepResult()
    if settle_lost:
        settle_lost_workers(session=session, silent_seconds=worker_lost_seconds, result=result)
    for job in job_store.take_undispatched_queued_jobs(session=session,
                                                       older_than_seconds=redispatch_seconds):
        if (spec := _spec_or_fail(session=session, job=job, result=result)) is not None:
            result.to_send.append((job.id, spec))
    return result


def _spec_or_fail(*, session: Session, job: Job, result: SweepResult) -> JobSpec | None:
    """The job's spec; or, for a row whose stored spec no longer validates (it could never
    run), None, with the job failed saying so: one such row must not stop the sweep of
    every other job."""
    try:
        return job.spec_model
    except StoredSpecInvalid as error:
        log.warning("%s", error)
        job_store.mark_job_failed(session=session, job_id=job.id, error=str(error),
                                  failure_kind=INPUT_ERROR)
        result.failed_jobs.append(job.id)
        return None


@dataclass(frozen=True)
class RunningSweep:
    stop_event: threading.Event
    thread: threading.Thread

    def stop(self, timeout_seconds: float = 30.0) -> None:
        """Stop, and wait for a sweep under way to end (before its database goes away)."""
        self.stop_event.set()
        self.thread.join(timeout_seconds)


class Sweeper:
    """Runs the sweep for one process (a worker's heartbeat, or the web) and sends what it
    frees. It declares workers lost only after it has itself reached the database for
    `worker_lost_seconds` in a row: after an outage every worker looks silent, and the
    sweeper that comes back first must give them time to beat again."""

    def __init__(self, *, database: Database, settings: Settings, send: Send,
                 clock: Callable[[], float] = time.monotonic):
        self._database, self._settings, self._send, self._clock = database, settings, send, clock
        self._reachable_since: float | None = None

    def note_unreachable(self) -> None:
        self._reachable_since = None

    def sweep(self) -> SweepResult:
        asked = self._clock()
        try:
            with self._database.transaction() as session:
                take_write_lock(session)
                now = self._clock()
                # Writers were kept out (SQLite's file locked by another process) while
                # readers were not: the workers' heartbeats waited as long as this did, so
                # their silence says nothing until they have had time to beat again.
                if now - asked > self._settings.heartbeat_seconds:
                    self.note_unreachable()
                result = sweep_cluster(
                    session=session, worker_lost_seconds=self._settings.worker_lost_seconds,
                    redispatch_seconds=self._settings.redispatch_seconds,
                    settle_lost=self._trusts_silence(now))
        except Exception:
            self.note_unreachable()
            raise
        if self._reachable_since is None:
            self._reachable_since = now
        LOST_WORKERS_COLLECTOR.inc(len(result.lost_workers))
        for name in result.lost_workers:
            log.warning("worker %s is lost (no heartbeat for %s s)", name,
                        self._settings.worker_lost_seconds)
        for job_id, spec in result.to_send:
            self._send(job_id, spec)
        return result

    def start_thread(self) -> RunningSweep:
        """Sweep every heartbeat interval in a daemon thread (the web runs one, so a lone
        worker's death is noticed too); `stop()` the answer to end it."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self._settings.heartbeat_seconds):
                try:
                    self.sweep()
                except Exception:  # the database or broker is down for a moment: try again
                    log.exception("cluster sweep failed; retrying")

        thread = threading.Thread(target=loop, name="tunedeck-sweep", daemon=True)
        thread.start()
        return RunningSweep(stop, thread)

    def _trusts_silence(self, now: float) -> bool:
        return (self._reachable_since is not None
                and now - self._reachable_since >= self._settings.worker_lost_seconds)


def take_write_lock(session: Session) -> None:
    """Start the session's transaction as a writer (an update of no row): it waits here, as
    long as the database makes writers wait, rather than at the sweep's first real write
    after deciding on what it read before the wait."""
    session.execute(update(Worker).where(false()).values(state=Worker.state))


def settle_lost_workers(*, session: Session, silent_seconds: float, result: SweepResult) -> None:
    cutoff = utc_now() - timedelta(seconds=silent_seconds)
    for worker in worker_registry.silent_workers(session=session, silent_seconds=silent_seconds):
        if not worker_registry.claim_lost_worker(session=session, name=worker.name,
                                                 last_seen_before=cutoff):
            continue  # another sweeper settled it
        result.lost_workers.append(worker.name)
        silent_since = worker.last_seen_at.strftime("%H:%M:%S UTC")
        jobs = {job.id: job for job in [
            *job_queries.list_running_jobs_of_worker(session=session, worker_name=worker.name),
            # A job is lost with any of its nodes: the others cannot go on without it.
            *job_queries.list_running_jobs_with_a_node_on(session=session, worker_name=worker.name)]}
        for job in jobs.values():
            if job.slurm_job_id is not None:
                continue  # Slurm runs it on; the executor that starts next follows it again
            give_up_job(session=session, job=job, result=result,
                        why=f"worker lost: worker {worker.name} on {worker.host} sent no "
                            f"heartbeat since {silent_since} (over {silent_seconds:g} s)")


def give_up_job(*, session: Session, job: Job, why: str, result: SweepResult) -> None:
    """A running job nothing supervises any more: queued again from its latest checkpoint
    while its spec's `max_restarts` allows, else failed with `why`."""
    restarts_used = max(0, job.attempts - 1)
    if (spec := _spec_or_fail(session=session, job=job, result=result)) is None:
        return
    allowed = spec.max_restarts
    if restarts_used < allowed:
        job_store.requeue_lost_job(
            session=session, job_id=job.id,
            reason=f"{why}; restart {restarts_used + 1} of {allowed}, from the latest checkpoint")
        result.to_send.append((job.id, spec))
    else:
        detail = (f"; its {allowed} restart(s) are used up" if allowed else
                  "; set max_restarts in the spec to have such a job restarted")
        job_store.mark_job_failed(session=session, job_id=job.id, error=why + detail,
                                  failure_kind=WORKER_LOST)
        result.failed_jobs.append(job.id)
