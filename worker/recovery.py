"""What a worker settles when it starts: jobs its host was running when a previous worker
died. Their launcher is gone, so nothing will ever finish them: they are failed as
"worker lost", or queued again where their spec allows restarts."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import psutil
from sqlalchemy.orm import Session

from tunedeck.jobs import queries as job_queries
from tunedeck.cluster.sweep import SweepResult, give_up_job


def settle_jobs_whose_launcher_is_gone(*, session: Session, worker_host: str,
                                       worker_started_at: datetime) -> SweepResult:
    """The caller sends `to_send` (the jobs queued again) once the transaction commits.
    Only jobs claimed before this worker started count: Celery may hand this worker a job
    before its start-up settling runs, and that job, claimed a moment ago, has no launcher
    yet because it is about to get one."""
    result = SweepResult()
    for job in job_queries.list_running_jobs(session=session, worker_host=worker_host,
                                           claimed_before=worker_started_at):
        if job.slurm_job_id is not None:
            continue  # Slurm runs it (its node may be this host); its executor follows it
        if _launcher_alive(job.launcher_pid, job.run_dir):
            continue  # another worker on this host still runs it
        give_up_job(session=session, job=job, result=result,
                    why=f"worker lost: the worker on {worker_host} stopped while the job ran, "
                        "and none of the job's processes is left")
    return result


def _launcher_alive(pid: int | None, run_dir: str | None) -> bool:
    if pid is None or not run_dir:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        # A reused pid belongs to some other program. A cold launcher names the run folder
        # on its command line; a warm one (worker/warm_launcher.py) does not, but like the
        # cold one it writes its output to the run folder's log.
        return run_dir in process.cmdline() or any(
            Path(file.path).is_relative_to(run_dir) for file in process.open_files())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
