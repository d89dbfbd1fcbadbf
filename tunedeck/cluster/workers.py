"""The workers table: each worker's heartbeat (host, queues, GPUs with their live memory),
and the named changes of a worker's state: online, stopped (it said goodbye) or lost (its
heartbeats stopped). The caller owns the transaction."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tunedeck.cluster.placement import SlurmPartitionView, WorkerView
from tunedeck.db.models import Worker, utc_now

ONLINE = "online"
STOPPED = "stopped"
LOST = "lost"


def record_heartbeat(*, session: Session, name: str, host: str, queues: Sequence[str], pid: int,
                     concurrency: int, resources: dict[str, Any], started_at: datetime) -> None:
    """Insert or refresh the worker's row; it is online as of now."""
    values = dict(host=host, queues=list(queues), pid=pid, concurrency=concurrency,
                  resources=resources, state=ONLINE, started_at=started_at,
                  last_seen_at=utc_now())
    worker = session.get(Worker, name, populate_existing=True)
    if worker is None:
        session.add(Worker(name=name, **values))
    else:
        for key, value in values.items():
            setattr(worker, key, value)
    session.flush()


def mark_worker_stopped(*, session: Session, name: str) -> None:
    session.execute(update(Worker).where(Worker.name == name).values(state=STOPPED))


def claim_lost_worker(*, session: Session, name: str, last_seen_before: datetime) -> bool:
    """Mark an online worker lost if it has not been seen since `last_seen_before`; True
    for the one caller that made the change (several sweepers may race for it)."""
    result = session.execute(
        update(Worker)
        .where(Worker.name == name, Worker.state == ONLINE,
               Worker.last_seen_at < last_seen_before)
        .values(state=LOST)
        .execution_options(synchronize_session=False))
    return result.rowcount == 1


def list_workers(*, session: Session) -> list[Worker]:
    return list(session.scalars(select(Worker).order_by(Worker.host, Worker.name)))


def silent_workers(*, session: Session, silent_seconds: float) -> list[Worker]:
    """Online workers whose last heartbeat is older than `silent_seconds`."""
    cutoff = utc_now() - timedelta(seconds=silent_seconds)
    query = select(Worker).where(Worker.state == ONLINE, Worker.last_seen_at < cutoff)
    return list(session.scalars(query.order_by(Worker.name)))


def live_worker_views(*, session: Session, silent_seconds: float) -> list[WorkerView]:
    """The workers placement may count on: online and heard from recently."""
    cutoff = utc_now() - timedelta(seconds=silent_seconds)
    query = select(Worker).where(Worker.state == ONLINE, Worker.last_seen_at >= cutoff)
    return [worker_view(worker) for worker in session.scalars(query.order_by(Worker.name))]


def worker_view(worker: Worker) -> WorkerView:
    gpus = worker.resources.get("gpus")
    speed_packages = worker.resources.get("speed_packages")
    return WorkerView(
        name=worker.name, host=worker.host, queues=tuple(worker.queues),
        gpu_indices=None if gpus is None else tuple(gpu["index"] for gpu in gpus),
        concurrency=worker.concurrency, slurm=SlurmPartitionView.of(worker.resources.get("slurm")),
        speed_packages=None if speed_packages is None else frozenset(speed_packages),
        memory_total_mb=worker.resources.get("memory_total_mb"))
