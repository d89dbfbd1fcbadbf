"""Named functions that change job rows; the only writers of job state (the read-side
queries are tunedeck/jobs/queries.py).

Every status change is one conditional UPDATE (WHERE status IN allowed sources), so two
processes racing for the same job cannot both win, on SQLite and PostgreSQL alike.
The caller owns the transaction.
"""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from tunedeck.db.models import Job, JobEvent, JobNode, JobSample, MetricPoint, utc_now
from tunedeck.db.request_rows import JobGeneration
from tunedeck.jobs.queries import PLACEMENT_EVENT, JobNotFound, get_job
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.states import (CANCELLED, FAILED, FINISHED_STATUSES, NODE_ASSIGNED, NODE_EXITED,
                                 NODE_STARTED, QUEUED, RUNNING, SUCCEEDED, InvalidTransition,
                                 sources_of)


def create_job(*, session: Session, spec: JobSpec, owner: str | None = None) -> Job:
    job = Job(name=spec.display_name, status=QUEUED, spec=spec.model_dump(mode="json"),
              owner=owner)
    session.add(job)
    session.flush()
    if spec.name is None:  # unnamed jobs of one model, method and backend told apart by id
        job.name = f"{spec.display_name}-{job.id}"
    add_job_event(session=session, job_id=job.id, kind="status", message="queued")
    return job


def assign_nodes(*, session: Session, job_id: int,
                 nodes: list[tuple[int, str, str, list[int] | None]]) -> None:
    """Give nodes 1.. of a claimed job to workers: (node rank, worker name, host, GPUs).
    A restarted job's earlier assignment is replaced."""
    session.execute(delete(JobNode).where(JobNode.job_id == job_id))
    for node_rank, worker_name, host, gpus in nodes:
        session.add(JobNode(job_id=job_id, node_rank=node_rank, worker_name=worker_name,
                            host=host, gpu_indices=gpus, state=NODE_ASSIGNED))
    session.flush()


def start_node(*, session: Session, job_id: int, node_rank: int, worker_name: str) -> bool:
    """The node's worker starts it: True once, for an assigned node of a running job."""
    running = select(Job.id).where(Job.id == job_id, Job.status == RUNNING).scalar_subquery()
    result = session.execute(
        update(JobNode).where(JobNode.job_id == running, JobNode.node_rank == node_rank,
                              JobNode.worker_name == worker_name, JobNode.state == NODE_ASSIGNED)
        .values(state=NODE_STARTED).execution_options(synchronize_session=False))
    return result.rowcount == 1


def finish_node(*, session: Session, job_id: int, node_rank: int, exit_code: int | None) -> None:
    session.execute(update(JobNode).where(JobNode.job_id == job_id, JobNode.node_rank == node_rank)
                    .values(state=NODE_EXITED, exit_code=exit_code)
                    .execution_options(synchronize_session=False))


def take_undispatched_queued_jobs(*, session: Session, older_than_seconds: float,
                                  limit: int = 100) -> list[Job]:
    """Queued jobs whose id was last sent (or which were queued) longer ago than
    `older_than_seconds`, stamped as sent now: the caller sends them again after commit.
    Nobody holds a queued job, so a message lost with a broker restart or a dead worker
    would otherwise strand it; a duplicate is harmless (only one claim succeeds)."""
    cutoff = utc_now() - timedelta(seconds=older_than_seconds)
    last_sent = func.coalesce(Job.dispatched_at, Job.updated_at)
    jobs = list(session.scalars(select(Job).where(Job.status == QUEUED, last_sent < cutoff)
                                .order_by(Job.id).limit(limit)))
    if jobs:
        session.execute(update(Job).where(Job.id.in_([job.id for job in jobs]))
                        .values(dispatched_at=utc_now())
                        .execution_options(synchronize_session=False))
    return jobs


def note_job_waiting(*, session: Session, job_id: int, reason: str) -> None:
    """A worker saw the queued job but had no room: stamp it (so the sweep does not send it
    again at once) and say why on its page, once per distinct reason."""
    session.execute(update(Job).where(Job.id == job_id, Job.status == QUEUED)
                    .values(dispatched_at=utc_now())
                    .execution_options(synchronize_session=False))
    last = session.scalar(select(JobEvent.message).where(JobEvent.job_id == job_id)
                          .order_by(JobEvent.id.desc()).limit(1))
    if last != reason:
        add_job_event(session=session, job_id=job_id, kind=PLACEMENT_EVENT, message=reason)


def add_job_event(*, session: Session, job_id: int, kind: str, message: str) -> None:
    session.add(JobEvent(job_id=job_id, kind=kind, message=message))


def _transition(*, session: Session, job_id: int, target: str,
                from_statuses: tuple[str, ...] | None = None, **values) -> Job:
    """`from_statuses` narrows the state machine's sources where a named change means only
    some of them (resume: failed or cancelled; a lost worker's requeue: running)."""
    sources = sources_of(target)
    if from_statuses is not None:
        sources = [status for status in sources if status in from_statuses]
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(sources))
        .values(status=target, updated_at=utc_now(), **values)
        .execution_options(synchronize_session=False)
    )
    job = get_job(session=session, job_id=job_id)
    if result.rowcount != 1:
        raise InvalidTransition(job_id, job.status, target)
    add_job_event(session=session, job_id=job_id, kind="status", message=_status_message(job))
    return job


def _status_message(job: Job) -> str:
    return f"{job.status}: {job.error}" if job.error else job.status


def mark_job_running(*, session: Session, job_id: int, run_dir: str, worker_host: str,
                     worker_name: str | None = None, gpu_indices: list[int] | None = None,
                     rendezvous: str | None = None) -> Job:
    """Claim a queued job for a worker and the GPUs it gives the job (and, on several
    nodes, where node 0 hosts the rendezvous); raises InvalidTransition when someone else
    already did. A resumed or restarted job keeps its first start; `claimed_at` is this one."""
    now = utc_now()
    return _transition(session=session, job_id=job_id, target=RUNNING, run_dir=run_dir,
                       worker_host=worker_host, worker_name=worker_name, gpu_indices=gpu_indices,
                       rendezvous=rendezvous, claimed_at=now,
                       started_at=func.coalesce(Job.started_at, now), attempts=Job.attempts + 1)


def requeue_lost_job(*, session: Session, job_id: int, reason: str) -> Job:
    """A running job whose worker was lost, with restarts left: queued again, to continue
    from its latest checkpoint on whichever worker claims it."""
    job = _transition(session=session, job_id=job_id, target=QUEUED, from_statuses=(RUNNING,),
                      worker_name=None,
                      gpu_indices=None, launcher_pid=None, cancel_requested=False,
                      resume_requested=True, dispatched_at=None)
    add_job_event(session=session, job_id=job_id, kind="status", message=reason)
    return job


def requeue_slurm_job(*, session: Session, job_id: int, reason: str) -> Job:
    """Slurm requeued the running job (a preemption, `scontrol requeue`): queued again
    under the same Slurm job, which resumes from its latest checkpoint when it restarts."""
    job = _transition(session=session, job_id=job_id, target=QUEUED, from_statuses=(RUNNING,),
                      gpu_indices=None, cancel_requested=False, resume_requested=True)
    add_job_event(session=session, job_id=job_id, kind="status", message=reason)
    return job


def resume_job(*, session: Session, job_id: int, checkpoint_step: int) -> Job:
    """Queue a failed or cancelled job again, to continue from its checkpoint at
    `checkpoint_step`; raises InvalidTransition for any other status."""
    job = _transition(session=session, job_id=job_id, target=QUEUED,
                      from_statuses=(FAILED, CANCELLED), error=None,
                      failure_kind=None, failed_rank=None, cancel_requested=False, finished_at=None, launcher_pid=None,
                      resume_requested=True)
    add_job_event(session=session, job_id=job_id, kind="status",
                  message=f"resume requested from the checkpoint at step {checkpoint_step}")
    return job


def record_launcher_pid(*, session: Session, job_id: int, launcher_pid: int) -> None:
    session.execute(update(Job).where(Job.id == job_id).values(launcher_pid=launcher_pid))


def record_slurm_submission(*, session: Session, job_id: int, slurm_job_id: str,
                            worker_name: str, run_dir: str) -> None:
    """A Slurm executor submitted the queued job: its Slurm id and the executor that
    follows it. The job stays queued (with Slurm's reason) until Slurm starts it."""
    result = session.execute(update(Job).where(Job.id == job_id, Job.status == QUEUED)
                             .values(slurm_job_id=slurm_job_id, worker_name=worker_name,
                                     run_dir=run_dir, dispatched_at=utc_now())
                             .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        job = get_job(session=session, job_id=job_id)
        raise InvalidTransition(job_id, job.status, QUEUED)
    add_job_event(session=session, job_id=job_id, kind="slurm",
                  message=f"submitted to Slurm as job {slurm_job_id}")


def mark_job_succeeded(*, session: Session, job_id: int) -> Job:
    return _transition(session=session, job_id=job_id, target=SUCCEEDED, finished_at=utc_now())


def mark_job_failed(*, session: Session, job_id: int, error: str,
                    failure_kind: str | None = None, failed_rank: int | None = None) -> Job:
    """`failure_kind` says why (worker.failure_triage's kinds), `failed_rank` which rank
    failed first, when known."""
    return _transition(session=session, job_id=job_id, target=FAILED, error=error,
                       failure_kind=failure_kind, failed_rank=failed_rank,
                       finished_at=utc_now())


def mark_job_cancelled(*, session: Session, job_id: int) -> Job:
    return _transition(session=session, job_id=job_id, target=CANCELLED, finished_at=utc_now())


def request_cancel(*, session: Session, job_id: int) -> Job:
    """Cancel: a queued job ends at once; a running one gets the flag its worker obeys."""
    job = get_job(session=session, job_id=job_id)
    if job.status in FINISHED_STATUSES:
        return job
    if job.status == QUEUED:
        try:
            return mark_job_cancelled(session=session, job_id=job_id)
        except InvalidTransition:
            job = get_job(session=session, job_id=job_id)  # a worker claimed it meanwhile
    if job.status == RUNNING and not job.cancel_requested:
        session.execute(update(Job).where(Job.id == job_id).values(cancel_requested=True))
        add_job_event(session=session, job_id=job_id, kind="status", message="cancel requested")
    return get_job(session=session, job_id=job_id)


def set_job_archived(*, session: Session, job_id: int, archived: bool) -> Job:
    """Archive or unarchive a job (any status: it only hides it from listings)."""
    result = session.execute(update(Job).where(Job.id == job_id).values(archived=archived)
                             .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        raise JobNotFound(job_id)
    add_job_event(session=session, job_id=job_id, kind="archive",
                  message="archived" if archived else "unarchived")
    return get_job(session=session, job_id=job_id)


class JobStillActive(Exception):
    """A queued or running job cannot be deleted: its trainer could still write."""

    def __init__(self, job_id: int, status: str):
        super().__init__(f"job {job_id} is {status}; cancel it and wait until it has "
                         "stopped before deleting it")
        self.job_id, self.status = job_id, status


def delete_job(*, session: Session, job_id: int) -> None:
    """Delete a finished job's row and every row that names it (nodes, events, metric
    points, samples, generations). The condition on status is in the DELETE itself, so a
    job a worker claims meanwhile is never deleted under it. Audit rows are kept: the trail
    outlives what it names."""
    job = get_job(session=session, job_id=job_id)
    if job.status not in FINISHED_STATUSES:
        raise JobStillActive(job_id, job.status)
    # Foreign keys cascade on PostgreSQL; SQLite enforces them only with a pragma, so the
    # dependent rows are deleted by name on both.
    for table in (JobNode, JobEvent, MetricPoint, JobSample, JobGeneration):
        session.execute(delete(table).where(table.job_id == job_id)
                        .execution_options(synchronize_session=False))
    result = session.execute(delete(Job).where(Job.id == job_id,
                                               Job.status.in_(FINISHED_STATUSES))
                             .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        raise JobStillActive(job_id, get_job(session=session, job_id=job_id).status)
    session.expunge(job)
