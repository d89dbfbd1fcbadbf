"""A worker that starts settles the jobs its host was running when an earlier worker died:
failed as "worker lost", or queued again when the spec allows restarts."""
import subprocess
import sys

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.db.models import utc_now
from tunedeck.spec.job_spec import JobSpec
from worker.recovery import settle_jobs_whose_launcher_is_gone


def running_job(database, *, host: str, run_dir: str, launcher_pid: int | None,
                max_restarts: int = 0) -> int:
    with database.transaction() as session:
        spec = JobSpec(max_steps=1, max_restarts=max_restarts)
        job_id = job_store.create_job(session=session, spec=spec).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=run_dir, worker_host=host)
        if launcher_pid is not None:
            job_store.record_launcher_pid(session=session, job_id=job_id, launcher_pid=launcher_pid)
    return job_id


def status_and_error(database, job_id: int) -> tuple[str, str | None]:
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
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
            settled = settle_jobs_whose_launcher_is_gone(session=session, worker_host="gpu-1",
                                                       worker_started_at=utc_now())
        assert sorted(settled.failed_jobs) == sorted([lost, never_launched, reused_pid])
        assert settled.to_send == []
        status, error = status_and_error(database, lost)
        assert status == "failed" and error.startswith("worker lost: the worker on gpu-1 stopped")
        with database.transaction() as session:
            assert job_queries.get_job(session=session, job_id=lost).failure_kind == "worker_lost"
        assert status_and_error(database, alive)[0] == "running"
        assert status_and_error(database, elsewhere)[0] == "running"
    finally:
        live.kill()
        live.wait()


def test_a_job_with_restarts_left_is_queued_again_to_resume(database, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    job_id = running_job(database, host="gpu-1", run_dir=str(tmp_path / "job"),
                         launcher_pid=dead.pid, max_restarts=1)
    with database.transaction() as session:
        settled = settle_jobs_whose_launcher_is_gone(session=session, worker_host="gpu-1",
                                                       worker_started_at=utc_now())
    assert settled.failed_jobs == [] and [sent for sent, _spec in settled.to_send] == [job_id]
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
        assert (job.status, job.resume_requested, job.worker_name) == ("queued", True, None)
        # Claimed again and lost again: its one restart is used, so now it fails.
        job_store.mark_job_running(session=session, job_id=job_id, run_dir="x", worker_host="gpu-1",
                                   worker_name="default@gpu-1", gpu_indices=[0])
        job_store.record_launcher_pid(session=session, job_id=job_id, launcher_pid=dead.pid)
    with database.transaction() as session:
        settled = settle_jobs_whose_launcher_is_gone(session=session, worker_host="gpu-1",
                                                       worker_started_at=utc_now())
    assert settled.failed_jobs == [job_id]
    status, error = status_and_error(database, job_id)
    assert status == "failed" and "its 1 restart(s) are used up" in error


def test_a_job_this_worker_claimed_after_it_started_is_left_to_it(database, tmp_path):
    """Celery may hand a starting worker a job before its settling runs: that job, claimed
    a moment ago, has no launcher yet, and must not be failed as lost."""
    worker_started_at = utc_now()
    just_claimed = running_job(database, host="gpu-1", run_dir=str(tmp_path / "job"),
                               launcher_pid=None)
    with database.transaction() as session:
        settled = settle_jobs_whose_launcher_is_gone(session=session, worker_host="gpu-1",
                                                     worker_started_at=worker_started_at)
    assert settled.failed_jobs == [] and settled.to_send == []
    assert status_and_error(database, just_claimed)[0] == "running"
