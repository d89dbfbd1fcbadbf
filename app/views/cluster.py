"""The cluster as the web shows it: every worker from its heartbeats (host, queues, GPUs
with their live free memory, the jobs it runs on which GPUs), and the jobs still queued
with what each waits for. Read-only: one transaction of plain reads."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunedeck.jobs import queries as job_queries
from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.placement import WorkerView, job_queue, serves, waiting_reason
from tunedeck.db.engine import Database
from tunedeck.db.models import Job, JobNode, Worker, as_utc, utc_now
from tunedeck.jobs.failure_kinds import DISK_HOLD_WORDS
from tunedeck.jobs.states import NODE_EXITED, QUEUED, RUNNING


def cluster_overview(*, database: Database, worker_lost_seconds: float) -> dict[str, Any]:
    with database.transaction() as session:
        workers = worker_registry.list_workers(session=session)
        running, nodes = _running(session)
        queued = job_queries.list_queued_jobs(session=session, limit=200)
        live = worker_registry.live_worker_views(session=session,
                                                 silent_seconds=worker_lost_seconds)
        noted = _noted_reasons(session, queued)
    now = utc_now()
    by_worker = _running_by_worker(running, nodes)
    return {
        "workers": [_worker(worker, _placements(worker.name, running, nodes), now=now,
                            worker_lost_seconds=worker_lost_seconds)
                    for worker in workers],
        "queued": [_queued(job, live, by_worker, noted) for job in queued],
    }


def waiting_reasons(*, session: Session, jobs: list[Job],
                    worker_lost_seconds: float) -> dict[int, str]:
    """What each queued job of `jobs` waits for now, by id, as the cluster page says it."""
    queued = [job for job in jobs if job.status == QUEUED]
    if not queued:
        return {}
    live = worker_registry.live_worker_views(session=session, silent_seconds=worker_lost_seconds)
    by_worker = _running_by_worker(*_running(session))
    noted = _noted_reasons(session, queued)
    return {job.id: _queued(job, live, by_worker, noted)["waiting"] for job in queued}


def _running(session: Session) -> tuple[list[Job], list[JobNode]]:
    """The running jobs, and nodes 1.. of those on several nodes (each on its own worker)."""
    running = list(session.scalars(select(Job).where(Job.status == RUNNING)))
    nodes = list(session.scalars(select(JobNode).join(Job, Job.id == JobNode.job_id).where(
        Job.status == RUNNING, JobNode.state != NODE_EXITED)))
    return running, nodes


def _running_by_worker(running: list[Job], nodes: list[JobNode]) -> dict[str, list[int]]:
    """The running jobs each worker runs (a node of), by worker name."""
    by_worker: dict[str, list[int]] = {}
    for worker_name, job_id in [*((job.worker_name, job.id) for job in running),
                                *((node.worker_name, node.job_id) for node in nodes)]:
        if worker_name is not None:
            by_worker.setdefault(worker_name, []).append(job_id)
    return by_worker


def _queued(job: Job, live: list[WorkerView], running: dict[str, list[int]],
            noted: dict[int, str]) -> dict[str, Any]:
    spec = job.spec_model
    waiting = noted.get(job.id) or waiting_reason(spec, live, running)
    return {"id": job.id, "name": job.name, "queue": job_queue(spec), "host": spec.host,
            "num_gpus": spec.num_gpus, "waiting": waiting}


def _noted_reasons(session: Session, queued: list[Job]) -> dict[int, str]:
    """What only the job's newest placement note knows, not TuneDeck's own placement: Slurm's
    word on a job its executor submitted, and a worker's hold for room on its disk."""
    notes = job_queries.latest_placement_notes(session=session, job_ids=[job.id for job in queued])
    reasons = {job.id: notes[job.id] for job in queued
               if DISK_HOLD_WORDS in notes.get(job.id, "")}
    reasons.update({job.id: notes.get(job.id, f"waiting: submitted to Slurm as job "
                                              f"{job.slurm_job_id}")
                    for job in queued if job.slurm_job_id is not None})
    return reasons


def _placements(worker_name: str, running: list[Job], nodes: list[JobNode]) -> list[dict[str, Any]]:
    """The jobs (and nodes of jobs) a worker runs, with the GPUs each holds there."""
    by_id = {job.id: job for job in running}
    placed = [_placement(job, node_rank=0, gpu_indices=job.gpu_indices)
              for job in running if job.worker_name == worker_name]
    # (A job that ended between the two reads is no longer shown.)
    placed += [_placement(by_id[node.job_id], node_rank=node.node_rank,
                          gpu_indices=node.gpu_indices)
               for node in nodes if node.worker_name == worker_name and node.job_id in by_id]
    return placed


def _placement(job: Job, *, node_rank: int, gpu_indices: list[int] | None) -> dict[str, Any]:
    spec = job.spec_model
    return {"id": job.id, "name": job.name, "node_rank": node_rank, "gpu_indices": gpu_indices,
            "num_gpus": spec.num_gpus, "num_nodes": spec.num_nodes}


def _worker(worker: Worker, jobs: list[dict[str, Any]], *, now: datetime,
            worker_lost_seconds: float) -> dict[str, Any]:
    silent_for = (now - as_utc(worker.last_seen_at)).total_seconds()
    state = worker.state
    # Marked online but silent past the limit (the sweep has not run yet): "silent", so the
    # page does not promise GPUs nobody is watching.
    if state == worker_registry.ONLINE and silent_for > worker_lost_seconds:
        state = "silent"
    holder = {index: job["id"] for job in jobs for index in (job["gpu_indices"] or ())}
    gpus = worker.resources.get("gpus")
    return {
        "name": worker.name, "host": worker.host, "queues": worker.queues, "state": state,
        "pid": worker.pid, "concurrency": worker.concurrency,
        "started_at": as_utc(worker.started_at).isoformat(),
        "last_seen_at": as_utc(worker.last_seen_at).isoformat(),
        "seconds_since_heartbeat": round(silent_for, 1),
        "cpu_count": worker.resources.get("cpu_count"),
        "memory_total_mb": worker.resources.get("memory_total_mb"),
        "memory_available_mb": worker.resources.get("memory_available_mb"),
        # local, or slurm: an executor on a login node, with its partition as sinfo says
        # (nodes, CPUs and GPUs a node, idle and allocated; None while Slurm does not answer).
        "executor": "slurm" if "slurm" in worker.resources else "local",
        "slurm": worker.resources.get("slurm"),
        "gpus": None if gpus is None else [
            {**gpu, "free_mb": _free(gpu), "job_id": holder.get(gpu["index"])} for gpu in gpus],
        "jobs": jobs,
    }


def _free(gpu: dict[str, Any]) -> float | None:
    used, total = gpu.get("used_mb"), gpu.get("total_mb")
    return total - used if isinstance(used, (int, float)) and isinstance(total, (int, float)) \
        else None


def slurm_site_for(spec, *, database: Database, worker_lost_seconds: float) -> dict | None:
    """How the Slurm executor that would take `spec` writes its script (its heartbeat's
    `site`), when the live workers that could take it are all Slurm executors; else None."""
    with database.transaction() as session:
        live = [worker for worker in worker_registry.list_workers(session=session)
                if worker.state == worker_registry.ONLINE]
        views = worker_registry.live_worker_views(session=session,
                                                  silent_seconds=worker_lost_seconds)
    serving = {view.name for view in views if serves(view, spec)}
    candidates = [worker for worker in live if worker.name in serving]
    if not candidates or not all((worker.resources.get("slurm") or {}).get("site")
                                 for worker in candidates):
        return None
    return candidates[0].resources["slurm"]["site"]
