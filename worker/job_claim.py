"""A worker receiving a job's id: claim the row with the GPUs it gives the job, or hand
the id on to a worker that has room, or leave it queued and say what it waits for.

The database decides, not the broker: free GPUs are this worker's GPUs minus those its
running jobs hold, read in the same transaction as the claim. The threads of one worker
take a lock around it, so two of them never hand out the same GPU.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from tunedeck import job_store, worker_registry
from tunedeck.db.engine import Database
from tunedeck.job_placement import room_for, serves, waiting_reason
from tunedeck.job_spec import JobSpec
from tunedeck.job_states import QUEUED, InvalidTransition
from worker.worker_identity import WorkerIdentity

_claim_lock = threading.Lock()


@dataclass
class Claim:
    """What became of the id: `spec` and `gpus` (positions) when this worker claimed it,
    `hand_on_to` a worker name, or neither (not ours to run now: `status` says why)."""

    status: str
    spec: JobSpec | None = None
    gpus: list[int] | None = None
    resume: bool = False
    hand_on_to: str | None = None


def claim_job(job_id: int, *, identity: WorkerIdentity, database: Database, run_dir: str,
              worker_lost_seconds: float) -> Claim:
    with _claim_lock, database.transaction() as session:
        try:
            job = job_store.get_job(session=session, job_id=job_id)
        except job_store.JobNotFound:
            return Claim("missing")
        if job.status != QUEUED:
            return Claim(job.status)
        running = job_store.list_running_jobs_of_worker(session=session, worker_name=identity.name)
        gpus = None
        if serves(identity.view, job.spec):
            gpus = room_for(identity.view, job.spec, running_jobs=len(running),
                            held=[other.gpu_indices for other in running])
        if gpus is None:
            return _hand_on_or_wait(session, job_id, job.spec, identity, worker_lost_seconds)
        try:
            job = job_store.mark_job_running(session=session, job_id=job_id, run_dir=run_dir,
                                             worker_host=identity.host, worker_name=identity.name,
                                             gpu_indices=gpus)
        except InvalidTransition as reason:
            return Claim(reason.current)
        return Claim(job.status, spec=JobSpec.model_validate(job.spec), gpus=gpus,
                     resume=job.resume_requested)


def _hand_on_or_wait(session: Session, job_id: int, spec: dict[str, Any],
                     identity: WorkerIdentity, worker_lost_seconds: float) -> Claim:
    workers = worker_registry.live_worker_views(session=session, silent_seconds=worker_lost_seconds)
    for worker in workers:
        if worker.name == identity.name or not serves(worker, spec):
            continue
        running = job_store.list_running_jobs_of_worker(session=session, worker_name=worker.name)
        if room_for(worker, spec, running_jobs=len(running),
                    held=[other.gpu_indices for other in running]) is not None:
            return Claim(QUEUED, hand_on_to=worker.name)
    known = workers if any(worker.name == identity.name for worker in workers) \
        else [*workers, identity.view]
    job_store.note_job_waiting(session=session, job_id=job_id, reason=waiting_reason(spec, known))
    return Claim(QUEUED)


def jobs_to_offer(*, identity: WorkerIdentity, database: Database, limit: int = 20) -> list[int]:
    """Queued jobs this worker serves, oldest first: offered to itself when one of its
    jobs ends and frees GPUs (waiting jobs get a turn without the sweep's delay)."""
    with database.transaction() as session:
        jobs = job_store.list_queued_jobs(session=session, limit=limit * 5)
    return [job.id for job in jobs if serves(identity.view, job.spec)][:limit]
