"""Read-side queries over job rows: lookups, listings, what a worker holds, and the flags a
supervising worker polls. Nothing here changes a row: tunedeck/jobs/store.py is the only
writer of job state, and its state changes read the row back through `get_job`.

The caller owns the session.
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tunedeck.db.models import Job, JobEvent, JobNode
from tunedeck.jobs.states import NODE_EXITED, QUEUED, RUNNING

# The largest id a job row can have: jobs.id is an Integer column, 32-bit on PostgreSQL
# (SQLite's are 64-bit). A larger id makes the driver raise (psycopg "integer out of
# range", SQLite OverflowError past 2^63), a 500, instead of finding no row.
MAX_JOB_ID = 2**31 - 1


class JobNotFound(Exception):
    def __init__(self, job_id: int):
        super().__init__(f"job {job_id} does not exist")
        self.job_id = job_id


def get_job(*, session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id, populate_existing=True)
    if job is None:
        raise JobNotFound(job_id)
    return job


def list_jobs(*, session: Session, limit: int = 200, owner: str | None = None,
              status: str | None = None, model_contains: str | None = None,
              archived: bool = False) -> list[Job]:
    """The newest jobs first; only `owner`'s, only those in `status`, and only those whose
    spec's model contains `model_contains` (any case), when given. Archived jobs only
    with `archived` (then those alone), unarchived ones otherwise."""
    query = select(Job).where(Job.archived.is_(archived))
    if owner is not None:
        query = query.where(Job.owner == owner)
    if status is not None:
        query = query.where(Job.status == status)
    if model_contains is not None:
        model = func.lower(Job.spec["model"].as_string())
        query = query.where(model.contains(model_contains.lower(), autoescape=True))
    return list(session.scalars(query.order_by(Job.id.desc()).limit(limit)))


def list_queued_job_ids(*, session: Session) -> list[int]:
    return list(session.scalars(select(Job.id).where(Job.status == QUEUED).order_by(Job.id)))


def list_running_jobs(*, session: Session, worker_host: str,
                      claimed_before: datetime | None = None) -> list[Job]:
    query = select(Job).where(Job.status == RUNNING, Job.worker_host == worker_host)
    if claimed_before is not None:
        query = query.where(Job.claimed_at < claimed_before)
    return list(session.scalars(query.order_by(Job.id)))


def list_running_jobs_of_worker(*, session: Session, worker_name: str) -> list[Job]:
    query = select(Job).where(Job.status == RUNNING, Job.worker_name == worker_name)
    return list(session.scalars(query.order_by(Job.id)))


def list_queued_jobs(*, session: Session, limit: int = 100) -> list[Job]:
    """The oldest queued jobs first."""
    return list(session.scalars(select(Job).where(Job.status == QUEUED).order_by(Job.id)
                                .limit(limit)))


def list_slurm_jobs_of_worker(*, session: Session, worker_name: str) -> list[Job]:
    """The queued and running jobs an executor submitted to Slurm: the ones it follows
    again when it starts."""
    return list(session.scalars(select(Job).where(
        Job.worker_name == worker_name, Job.slurm_job_id.is_not(None),
        Job.status.in_((QUEUED, RUNNING))).order_by(Job.id)))


def worker_load(*, session: Session, worker_name: str) -> list[list[int] | None]:
    """The GPUs each job on a worker holds there, one entry a job (node 0 of its running
    jobs, and the other nodes it runs of jobs on several nodes): its count is the jobs the
    worker runs."""
    held = [job.gpu_indices for job in list_running_jobs_of_worker(session=session,
                                                                   worker_name=worker_name)]
    nodes = session.scalars(select(JobNode).join(Job, Job.id == JobNode.job_id).where(
        JobNode.worker_name == worker_name, JobNode.state != NODE_EXITED, Job.status == RUNNING))
    return held + [node.gpu_indices for node in nodes]


def list_running_jobs_with_a_node_on(*, session: Session, worker_name: str) -> list[Job]:
    """Running jobs of which the worker runs a node other than node 0."""
    query = select(Job).join(JobNode, Job.id == JobNode.job_id).where(
        JobNode.worker_name == worker_name, JobNode.state != NODE_EXITED, Job.status == RUNNING)
    return list(session.scalars(query.order_by(Job.id)))


def list_job_nodes(*, session: Session, job_id: int) -> list[JobNode]:
    return list(session.scalars(select(JobNode).where(JobNode.job_id == job_id)
                                .order_by(JobNode.node_rank)))


def list_job_events(*, session: Session, job_id: int, limit: int = 200) -> list[JobEvent]:
    query = select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id.desc())
    return list(reversed(list(session.scalars(query.limit(limit)))))


# A worker's word on why a queued job waits (job_store.note_job_waiting writes it).
PLACEMENT_EVENT = "placement"


def latest_placement_notes(*, session: Session, job_ids: list[int]) -> dict[int, str]:
    """The newest placement note of each job (one query for all of them)."""
    if not job_ids:
        return {}
    newest = (select(func.max(JobEvent.id)).where(JobEvent.job_id.in_(job_ids),
                                                  JobEvent.kind == PLACEMENT_EVENT)
              .group_by(JobEvent.job_id))
    rows = session.execute(select(JobEvent.job_id, JobEvent.message)
                           .where(JobEvent.id.in_(newest.scalar_subquery())))
    return {job_id: message for job_id, message in rows}


def run_control(*, session: Session, job_id: int, worker_name: str | None) -> tuple[bool, bool]:
    """What a supervising worker obeys: (cancel requested, still ours). A job is no longer
    ours once the sweep gave it up for lost (it is failed, or queued for another worker)."""
    row = session.execute(select(Job.cancel_requested, Job.status, Job.worker_name)
                          .where(Job.id == job_id)).one_or_none()
    if row is None:
        return True, False
    cancel, status, owner = row
    return bool(cancel), status == RUNNING and (worker_name is None or owner == worker_name)
