"""Several workers on one database and one Redis broker, as a team runs TuneDeck: jobs go
to the workers of their queue, the cluster page lists every worker from its heartbeats,
and a worker killed mid-job is noticed within 30 s: its job fails as "worker lost", or,
when the spec allows restarts, resumes from its checkpoint on the other worker."""
from __future__ import annotations

import json
import socket
from contextlib import ExitStack

import pytest

from harness.chaos_scenarios import FINISHED, SMALL_JOB, killed_worker, start_worker
from harness.servers import running_tunedeck, running_web, wait_for_workers, wait_until
from tests.conftest import REDIS_URL

pytestmark = [pytest.mark.torchrun]


@pytest.fixture
def cluster_env(postgres_url):
    # A Redis database of this test's own, so no message left by anything else is ours.
    redis_url = REDIS_URL.rsplit("/", 1)[0] + "/14"
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    return {"TUNEDECK_DATABASE_URL": postgres_url, "TUNEDECK_BROKER_URL": redis_url}


@pytest.mark.postgres
@pytest.mark.redis
def test_jobs_run_on_the_workers_of_their_queue_and_the_cluster_page_lists_them(tmp_path,
                                                                                 cluster_env):
    home = tmp_path / "home"
    with ExitStack() as stack:
        web = stack.enter_context(running_web(home, env=cluster_env))
        start_worker(stack, home, cluster_env, "alpha", "alpha")
        start_worker(stack, home, cluster_env, "beta", "beta,default")
        workers = wait_for_workers(web, {"alpha", "beta"})
        assert workers["beta"]["queues"] == ["beta", "default"]
        assert workers["alpha"]["host"] == socket.gethostname()
        assert workers["alpha"]["gpus"] is None and workers["alpha"]["cpu_count"] >= 1
        to_alpha = web.submit({**SMALL_JOB, "name": "for-alpha", "queue": "alpha"})
        to_beta = web.submit({**SMALL_JOB, "name": "for-default"})
        nobody = web.submit({**SMALL_JOB, "name": "for-gamma", "queue": "gamma"})
        for job_id, worker in ((to_alpha, "alpha"), (to_beta, "beta")):
            job = web.wait_for(job_id, FINISHED, timeout_seconds=240)
            assert (job["status"], job["worker_name"]) == ("succeeded", worker), job["error"]
        waiting = {job["id"]: job for job in web.http.get("/api/workers").json()["queued"]}
        assert waiting[nobody]["waiting"] == "waiting: no live worker serves queue 'gamma'"
        assert web.job(nobody)["status"] == "queued"
        # A worker for queue gamma joins: the waiting job runs there, nothing resent by hand.
        start_worker(stack, home, cluster_env, "gamma", "gamma")
        job = web.wait_for(nobody, FINISHED, timeout_seconds=240)
        assert (job["status"], job["worker_name"]) == ("succeeded", "gamma"), job["error"]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_killed_worker_is_noticed_within_30_s_and_its_jobs_fail_or_restart(tmp_path,
                                                                               cluster_env):
    report = killed_worker(tmp_path / "home", cluster_env)
    assert report.problems == []
    assert (report.submitted, report.finished_defined) == (2, 2)
    assert (report.duplicate_launches, report.lost_points) == (0, 0)
    assert 0 < report.detect_seconds[0] <= 30, report.detect_seconds


def test_a_host_runs_two_jobs_at_once_on_disjoint_gpus_and_a_third_waits(tmp_path):
    """One host, the embedded defaults (SQLite, the folder broker), a worker told it has 4
    GPUs (on this CPU-only machine the ranks still run on the CPU, but placement and
    CUDA_VISIBLE_DEVICES are what a 4-GPU host gets)."""
    home = tmp_path / "home"
    two_gpus = {**SMALL_JOB, "num_gpus": 2, "max_steps": 30}
    with running_tunedeck(home, extra_env={"TUNEDECK_WORKER_GPUS": "0,1,2,3"}) as server:
        first = server.submit({**two_gpus, "name": "first"})
        second = server.submit({**two_gpus, "name": "second"})
        third = server.submit({**two_gpus, "name": "third", "max_steps": 2})
        wait_until(lambda: {server.job(first)["status"], server.job(second)["status"]} == {"running"},
                   120, "both jobs to run at once")
        held = sorted(server.job(job_id)["gpu_indices"] for job_id in (first, second))
        assert held == [[0, 1], [2, 3]]
        overview = server.http.get("/api/workers").json()
        assert overview["workers"][0]["concurrency"] == 4
        assert [gpu["job_id"] is not None for gpu in overview["workers"][0]["gpus"]] == [True] * 4
        if server.job(third)["status"] == "queued":  # unless a job already ended
            waiting = {job["id"]: job["waiting"] for job in overview["queued"]}
            assert waiting[third] == "waiting for 2 free GPU(s) on a worker of queue 'default'"
        visible = {json.loads((home / "runs" / f"job-{job_id}" / "launch.json").read_text())
                   ["env"]["CUDA_VISIBLE_DEVICES"] for job_id in (first, second)}
        assert visible == {"0,1", "2,3"}
        for job_id in (first, second, third):
            job = server.wait_for(job_id, FINISHED, timeout_seconds=300)
            assert job["status"] == "succeeded", job["error"]
        third_job = server.job(third)
        assert third_job["started_at"] > min(server.job(first)["finished_at"],
                                             server.job(second)["finished_at"])
