"""The supervise loop stores the sampler's rows with the metric ingest: a fake launcher
starts two rank processes (RANK in their environment), as torchrun does, and exits."""
import socket
import sys

from tests.worker.test_sampler import FakeNvml
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import samples as sample_store
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from worker.process_group import JobProcesses, start_process_group
from worker.sampler import JobSampler
from worker.supervision import supervise

LAUNCHER = """
import os, subprocess, sys, time
ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"],
                          env={**os.environ, "RANK": str(rank)}) for rank in (0, 1)]
for rank in ranks:
    rank.wait()
"""


def test_samples_of_every_gpu_and_rank_are_stored_while_the_job_runs(database, tmp_path):
    # Ranks live 2.5 s here; the loop's 5 s scan for new processes would miss them, but it
    # scans every poll until it has seen the node's two ranks.
    settings = Settings(home=tmp_path)
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        # A job supervision runs is running (a job no longer running is stopped at once).
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(tmp_path / "run"),
                                   worker_host=socket.gethostname())
    run = RunFolder(tmp_path / "run")
    (run.path / "metrics").mkdir(parents=True)
    launcher = start_process_group([sys.executable, "-c", LAUNCHER], cwd=tmp_path, env={},
                                   log_file=tmp_path / "launcher.log")
    processes = JobProcesses(launcher)
    sampler = JobSampler(host=socket.gethostname(), gpu_ids=[0], nvml=FakeNvml(),
                         interval_seconds=0.5)
    try:
        supervise(job_id, processes, run, settings=settings, database=database,
                   shutdown_requested=lambda: False, sampler=sampler, ranks_on_node=2)
    finally:
        processes.kill()
    with database.transaction() as session:
        gpus = sample_store.read_samples(session=session, job_id=job_id, source="gpu")
        ranks = sample_store.read_samples(session=session, job_id=job_id, source="process")
    assert len(gpus) >= 2 and {row["gpu"] for row in gpus} == {0}
    assert gpus[0]["used_mb"] == 10240.0
    assert {row["rank"] for row in ranks} == {0, 1}
    # Found within a poll of starting, a rank of 2.5 s gets a sample every 0.5 s interval.
    assert min(sum(row["rank"] == rank for row in ranks) for rank in (0, 1)) >= 3, ranks
    assert all(row["rss_mb"] > 0 for row in ranks)
