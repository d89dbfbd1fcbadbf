"""A worker receiving a job's id: claim the row with the GPUs it gives the job, or hand
the id on to a worker that has room, or leave it queued and say what it waits for: GPUs,
or room on the disk of its run folders (worker/disk_room.py).

The database decides, not the broker: free GPUs are a worker's GPUs minus those its jobs
hold, read in the same transaction as the claim. The threads of one worker take a lock
around it, so two of them never hand out the same GPU. A job on several nodes is claimed
by the worker that runs node 0 (it hosts the rendezvous, and its ranks come first); in the
same transaction it gives nodes 1.. to other workers with room, which it then tells.
"""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.placement import WorkerView, room_for, serves, waiting_reason
from tunedeck.db.engine import Database
from tunedeck.db.models import Job, StoredSpecInvalid
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.states import QUEUED, InvalidTransition
from worker.disk_room import DiskRoom
from worker.worker_identity import WorkerIdentity

_claim_lock = threading.Lock()


@dataclass
class Claim:
    """What became of the id: `spec` and `gpus` (positions) when this worker claimed it,
    `hand_on_to` a worker name, or neither (not ours to run now: `status` says why).
    `status` is the job's as the claim left it (None: no such job; worker/outcome.py says
    what that makes of the id). `followers` are the (node rank, worker name) to tell of a
    job on several nodes."""

    status: str | None
    spec: JobSpec | None = None
    gpus: list[int] | None = None
    resume: bool = False
    hand_on_to: str | None = None
    rendezvous: str | None = None
    followers: list[tuple[int, str]] = field(default_factory=list)
    owner: str | None = None  # who submitted the job: their uploads folder is readable


def claim_job(job_id: int, *, identity: WorkerIdentity, database: Database, run_dir: str,
              worker_lost_seconds: float, disk_room: DiskRoom | None = None) -> Claim:
    """With `disk_room`, a job that fits the GPUs but not the disk stays queued, saying so."""
    with _claim_lock, database.transaction() as session:
        try:
            job = job_queries.get_job(session=session, job_id=job_id)
        except job_queries.JobNotFound:
            return Claim(None)
        if job.status != QUEUED:
            return Claim(job.status)
        gpus = None
        spec = job.spec_model
        if serves(identity.view, spec):
            gpus = _room(session, identity.view, spec, behind=job_id, disk_room=disk_room)
        nodes = spec.num_nodes
        others = (_place_other_nodes(session, spec, identity, worker_lost_seconds)
                  if gpus is not None and nodes > 1 else [])
        if gpus is None or (nodes > 1 and others is None):
            if nodes > 1:  # any worker with room may lead; no single one to hand it to
                return _wait(session, job_id, spec, identity, worker_lost_seconds)
            return _hand_on_or_wait(session, job_id, spec, identity, worker_lost_seconds)
        disk_hold = disk_room.hold_reason(spec, job_id=job_id, resuming=job.resume_requested) \
            if disk_room is not None else None
        if disk_hold is not None:
            job_store.note_job_waiting(session=session, job_id=job_id, reason=disk_hold)
            return Claim(QUEUED)
        rendezvous = f"{identity.address}:{_free_port()}" if nodes > 1 else None
        try:
            job = job_store.mark_job_running(session=session, job_id=job_id, run_dir=run_dir,
                                             worker_host=identity.host, worker_name=identity.name,
                                             gpu_indices=gpus, rendezvous=rendezvous)
        except InvalidTransition as reason:
            return Claim(reason.current)
        if nodes > 1:
            job_store.assign_nodes(session=session, job_id=job_id, nodes=[
                (rank, worker.name, worker.host, node_gpus) for rank, worker, node_gpus in others])
        return Claim(job.status, spec=spec, gpus=gpus,
                     resume=job.resume_requested, rendezvous=rendezvous,
                     followers=[(rank, worker.name) for rank, worker, _gpus in others or ()],
                     owner=job.owner)


def _room(session: Session, worker: WorkerView, spec: JobSpec, *,
          behind: int | None = None, disk_room: DiskRoom | None = None) -> list[int] | None:
    """The GPUs the worker can give the job now. With `behind` (the job's id), what is left
    once the older queued jobs it serves that fit are placed first (`_placed_first`)."""
    held = job_queries.worker_load(session=session, worker_name=worker.name)
    if behind is not None:
        held = [*held, *(gpus for _job_id, gpus in _placed_first(session, worker, behind, held,
                                                                  disk_room=disk_room))]
    return room_for(worker, spec, running_jobs=len(held), held=held)


def _placed_first(session: Session, worker: WorkerView, job_id: int,
                  held: list[list[int] | None], *,
                  disk_room: DiskRoom | None = None) -> list[tuple[int, list[int]]]:
    """The older queued jobs the worker serves that fit now, in order, with the GPUs each
    would take: jobs start in the order they were submitted, whichever of the worker's
    threads reads its message first. An older job too big for what is free, GPUs or the
    disk of `disk_room`, holds nothing back (a smaller one behind it runs now)."""
    placed: list[tuple[int, list[int]]] = []
    for job in job_queries.list_queued_jobs(session=session):
        if job.id >= job_id:
            break
        try:
            older = job.spec_model
        except StoredSpecInvalid:  # it can never run; the sweep fails it
            continue
        if older.num_nodes == 1 and serves(worker, older) \
                and (disk_room is None or disk_room.hold_reason(
                    older, job_id=job.id, resuming=job.resume_requested) is None):
            taken = [*held, *(gpus for _id, gpus in placed)]
            gpus = room_for(worker, older, running_jobs=len(taken), held=taken)
            if gpus is not None:
                placed.append((job.id, gpus))
    return placed


def _place_other_nodes(session: Session, spec: JobSpec, identity: WorkerIdentity,
                       worker_lost_seconds: float
                       ) -> list[tuple[int, WorkerView, list[int]]] | None:
    """Nodes 1.. of the job, each on another live worker of its queue with room now."""
    wanted = spec.num_nodes - 1
    placed: list[tuple[int, WorkerView, list[int]]] = []
    for worker in worker_registry.live_worker_views(session=session,
                                                    silent_seconds=worker_lost_seconds):
        if worker.name == identity.name or not serves(worker, spec):
            continue
        gpus = _room(session, worker, spec)
        if gpus is not None:
            placed.append((len(placed) + 1, worker, gpus))
            if len(placed) == wanted:
                return placed
    return None


def _hand_on_or_wait(session: Session, job_id: int, spec: JobSpec,
                     identity: WorkerIdentity, worker_lost_seconds: float) -> Claim:
    workers = worker_registry.live_worker_views(session=session, silent_seconds=worker_lost_seconds)
    for worker in workers:
        if worker.name != identity.name and serves(worker, spec) \
                and _room(session, worker, spec, behind=job_id) is not None:
            return Claim(QUEUED, hand_on_to=worker.name)
    return _wait(session, job_id, spec, identity, worker_lost_seconds, workers)


def _wait(session: Session, job_id: int, spec: JobSpec, identity: WorkerIdentity,
          worker_lost_seconds: float, workers: list[WorkerView] | None = None) -> Claim:
    if workers is None:
        workers = worker_registry.live_worker_views(session=session,
                                                    silent_seconds=worker_lost_seconds)
    known = workers if any(worker.name == identity.name for worker in workers) \
        else [*workers, identity.view]
    running = {worker.name: [job.id for job in job_queries.list_running_jobs_of_worker(
        session=session, worker_name=worker.name)] for worker in known}
    held = job_queries.worker_load(session=session, worker_name=identity.name)
    ahead = [older for older, _gpus in _placed_first(session, identity.view, job_id, held)]
    job_store.note_job_waiting(session=session, job_id=job_id,
                               reason=waiting_reason(spec, known, running, ahead))
    return Claim(QUEUED)


def _free_port() -> int:
    """A port for node 0's rendezvous store (torchrun binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def jobs_to_offer(*, identity: WorkerIdentity, database: Database, limit: int = 20) -> list[int]:
    """Queued jobs this worker serves, oldest first: offered to itself when one of its
    jobs ends and frees GPUs (waiting jobs get a turn without the sweep's delay)."""
    with database.transaction() as session:
        jobs = job_queries.list_queued_jobs(session=session, limit=limit * 5)
    return [job.id for job in jobs if _serves(identity, job)][:limit]


def _serves(identity: WorkerIdentity, job: Job) -> bool:
    try:
        return serves(identity.view, job.spec_model)
    except StoredSpecInvalid:  # it can never run; the sweep fails it, saying why
        return False
