"""A worker that starts fails the jobs its host was running when an earlier worker died."""
import subprocess
import sys

from tunedeck import job_store
from tunedeck.job_spec import JobSpec
from worker.recovery import fail_jobs_whose_launcher_is_gone


def running_job(database, *, host: str, run_dir: str, launcher_pid: int | None) -> int:
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=run_dir, worker_host=host)
        if launcher_pid is not None:
            job_store.record_launcher_pid(session=session, job_id=job_id, launcher_pid=launcher_pid)
    return job_id


def status_and_error(database, job_id: int) -> tuple[str, str | None]:
    with database.transaction() as session:
        job = job_store.get_job(session=session, job_id=job_id)
        return job.status, job.error


def test_jobs_of_a_dead_launcher_fail_and_live_or_foreign_ones_stay(database, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "--run-dir", str(tmp_path / "job-live")])
    try:
        lost = running_job(database, host="gpu-1", run_dir=str(tmp_path / "job-lost"),
                           launcher_pid=dead.pid)
        never_launched = running_job(database, host="gpu-1", run_dir=str(tmp_path / "x"),
                                     launcher_pid=None)
        alive = running_job(database, host="gpu-1", run_dir=str(tmp_path / "job-live"),
                            launcher_pid=live.pid)
        reused_pid = running_job(database, host="gpu-1", run_dir=str(tmp_path / "job-reused"),
                                 launcher_pid=live.pid)  # that pid now runs something else
        elsewhere = running_job(database, host="gpu-2", run_dir=str(tmp_path / "job-2"),
                                launcher_pid=dead.pid)
        with database.transaction() as session:
            failed = fail_jobs_whose_launcher_is_gone(session=session, worker_host="gpu-1")
        assert sorted(failed) == sorted([lost, never_launched, reused_pid])
        status, error = status_and_error(database, lost)
        assert status == "failed" and error.startswith("worker lost: the worker on gpu-1 stopped")
        with database.transaction() as session:
            assert job_store.get_job(session=session, job_id=lost).failure_kind == "worker_lost"
        assert status_and_error(database, alive)[0] == "running"
        assert status_and_error(database, elsewhere)[0] == "running"
    finally:
        live.kill()
        live.wait()
