"""Jobs on several nodes, tested on one machine: two workers on loopback, each its own
worker (and its own broker queue), 2 nodes x 1 CPU rank. Node 0's worker claims the job
and gives node 1 to the other; both torchruns meet at node 0's rendezvous. When a node
cannot start, the job fails within the start timeout, naming the node, and no process
of it keeps waiting."""
from __future__ import annotations

import socket
import threading
import time
from contextlib import ExitStack, contextmanager

import pytest

from harness.chaos_scenarios import FINISHED, SMALL_JOB, alive, job_processes, start_worker
from harness.servers import running_web, wait_for_workers, wait_until
from tests.conftest import REDIS_URL
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.engine import Database
from tunedeck.db.models import utc_now

pytestmark = [pytest.mark.torchrun, pytest.mark.postgres, pytest.mark.redis]
TWO_NODES = {**SMALL_JOB, "num_nodes": 2, "queue": "multi"}


@pytest.fixture
def cluster_env(postgres_url):
    redis_url = REDIS_URL.rsplit("/", 1)[0] + "/11"
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    return {"TUNEDECK_DATABASE_URL": postgres_url, "TUNEDECK_BROKER_URL": redis_url,
            "TUNEDECK_WORKER_ADDRESS": "127.0.0.1", "TUNEDECK_NODE_START_TIMEOUT_SECONDS": "20"}


def test_a_job_on_two_nodes_runs_one_torchrun_per_worker_and_stores_both_nodes_ranks(
        tmp_path, cluster_env):
    home = tmp_path / "home"
    with ExitStack() as stack:
        web = stack.enter_context(running_web(home, env=cluster_env))
        start_worker(stack, home, cluster_env, "alpha", "multi")
        start_worker(stack, home, cluster_env, "beta", "multi")
        wait_for_workers(web, {"alpha", "beta"})
        job_id = web.submit({**TWO_NODES, "name": "two-nodes", "max_steps": 6})
        job = web.wait_for(job_id, FINISHED, timeout_seconds=300)
        assert job["status"] == "succeeded", job["error"]
        leader = job["worker_name"]
        follower = ({"alpha", "beta"} - {leader}).pop()
        metrics = web.http.get(f"/api/jobs/{job_id}/metrics").json()
        assert [point["step"] for point in metrics["train"]] == [1, 2, 3, 4, 5, 6]
        assert {point["rank"] for point in metrics["memory"]} == {0, 1}  # each node's rank
        messages = [event["message"] for event in web.http.get(f"/api/jobs/{job_id}/events").json()]
        assert not [message for message in messages if "exited with code" in message], messages
        launch = (home / "runs" / f"job-{job_id}" / "launch-node-1.json").read_text()
        assert '"--node-rank",\n    "1"' in launch and "127.0.0.1:" in launch
        assert web.http.get(f"/api/jobs/{job_id}/artifacts/adapter").status_code == 200
        assert follower in {worker["name"] for worker in
                            web.http.get("/api/workers").json()["workers"]}


@contextmanager
def ghost_worker(database_url: str, name: str, queues: list[str]):
    """A worker row that keeps beating with no process behind it: a worker that looks
    alive to placement but never starts what it is given (as one hung after its last
    heartbeat)."""
    database = Database(database_url)
    stop = threading.Event()

    def beat() -> None:
        while True:
            with database.transaction() as session:
                worker_registry.record_heartbeat(
                    session=session, name=name, host=socket.gethostname(), queues=queues, pid=0,
                    concurrency=1, resources={"gpus": None, "cpu_count": 1}, started_at=utc_now())
            if stop.wait(2):
                return

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        database.dispose()


def test_a_node_that_cannot_start_fails_the_job_and_no_node_keeps_waiting(tmp_path, cluster_env):
    home = tmp_path / "home"
    with ExitStack() as stack:
        web = stack.enter_context(running_web(home, env=cluster_env))
        stack.enter_context(ghost_worker(cluster_env["TUNEDECK_DATABASE_URL"], "ghost", ["multi"]))
        start_worker(stack, home, cluster_env, "alpha", "multi")
        wait_for_workers(web, {"alpha", "ghost"})
        started = time.monotonic()
        job_id = web.submit({**TWO_NODES, "name": "node-missing", "max_steps": 100})
        wait_until(lambda: web.job(job_id)["status"] != "queued", 60, "alpha to claim")
        launched = wait_until(lambda: job_processes(home, job_id), 30, "node 0 to start")
        job = web.wait_for(job_id, FINISHED, timeout_seconds=120)
        assert (job["status"], job["worker_name"], job["failure_kind"]) == \
            ("failed", "alpha", "comm_timeout")
        assert job["error"].startswith("node 1 (worker ghost on ")
        assert "did not start within 20 s" in job["error"]
        assert time.monotonic() - started < 90
        wait_until(lambda: not any(alive(process) for process in launched)
                   and not job_processes(home, job_id), 45, "the job's processes to end")
