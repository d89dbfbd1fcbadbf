"""The worker's heartbeat thread: every few seconds it writes this worker's row (host,
queues, GPUs with their live memory) and runs the cluster sweep (lost workers, queued
jobs nobody claimed). A database that is briefly unreachable costs a few beats, never the
thread: the next beat tries again."""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable

from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.sweep import Send, Sweeper
from tunedeck.db.engine import Database
from tunedeck.db.models import utc_now
from tunedeck.settings import Settings
from worker.monitoring.exporter import WORKER_GAUGES
from worker.slurm.client import PartitionReader
from worker.worker_identity import HostResources, WorkerIdentity

log = logging.getLogger(__name__)


def beat(*, identity: WorkerIdentity, resources: HostResources, database: Database,
         started_at) -> None:
    described = resources.describe()
    WORKER_GAUGES.note_host(identity.name, described)  # the worker's /metrics reads these
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name=identity.name, host=identity.host, queues=identity.queues,
            pid=os.getpid(), concurrency=identity.concurrency, resources=described,
            started_at=started_at)


class Heartbeat:
    def __init__(self, *, identity: WorkerIdentity, settings: Settings, database: Database,
                 send: Send, describe_slurm: Callable[[], dict | None] | None = None):
        """`describe_slurm`: a Slurm executor's partition and script settings (sinfo), read
        every 30 s at most and reported with each heartbeat."""
        self._identity, self._settings, self._database, self._send = identity, settings, database, send
        self._resources = HostResources(identity, slurm_partition=PartitionReader(
            describe_slurm) if describe_slurm is not None else None)
        self._sweeper = Sweeper(database=database, settings=settings, send=send)
        self._started_at = utc_now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tunedeck-heartbeat", daemon=True)

    def start(self) -> None:
        self.beat_once()  # the cluster page knows this worker before it takes a job
        self._thread.start()

    def beat_once(self) -> None:
        try:
            beat(identity=self._identity, resources=self._resources, database=self._database,
                 started_at=self._started_at)
        except Exception:  # the database is down for a moment: beat again later
            self._sweeper.note_unreachable()
            log.exception("heartbeat of worker %s failed; retrying", self._identity.name)
            return
        try:
            self._sweeper.sweep()
        except Exception:  # the database or broker is down for a moment: sweep again later
            log.exception("heartbeat of worker %s failed; retrying", self._identity.name)

    def stop(self) -> None:
        """Say goodbye: the row turns `stopped`, so the sweep does not mistake a clean stop
        for a lost worker."""
        self._stop.set()
        try:
            with self._database.transaction() as session:
                worker_registry.mark_worker_stopped(session=session, name=self._identity.name)
        except Exception:
            log.exception("could not mark worker %s stopped", self._identity.name)

    def _run(self) -> None:
        while not self._stop.wait(self._settings.heartbeat_seconds):
            self.beat_once()
