"""What a worker settles when it starts: jobs its host was running when a previous worker
died. Their launcher is gone, so nothing will ever finish them: they are failed as
"worker lost", or queued again where their spec allows restarts."""
from __future__ import annotations

import psutil
from sqlalchemy.orm import Session

from tunedeck import job_store
from tunedeck.cluster_sweep import SweepResult, give_up_job


def settle_jobs_whose_launcher_is_gone(*, session: Session, worker_host: str) -> SweepResult:
    """The caller sends `to_send` (the jobs queued again) once the transaction commits."""
    result = SweepResult()
    for job in job_store.list_running_jobs(session=session, worker_host=worker_host):
        if _launcher_alive(job.launcher_pid, job.run_dir):
            continue  # another worker on this host still runs it
        give_up_job(session=session, job=job, result=result,
                    why=f"worker lost: the worker on {worker_host} stopped while the job ran, "
                        "and none of the job's processes is left")
    return result


def _launcher_alive(pid: int | None, run_dir: str | None) -> bool:
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        # A reused pid belongs to some other program: the launcher names the run folder.
        return process.status() != psutil.STATUS_ZOMBIE and (run_dir or "") in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
