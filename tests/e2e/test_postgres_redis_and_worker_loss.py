"""The same path on the team set-up (PostgreSQL and Redis), and a worker killed mid-job."""
from __future__ import annotations

import signal
import time

import psutil
import pytest
from sqlalchemy import create_engine, text

from harness.servers import running_tunedeck
from tests.conftest import REDIS_URL
from tests.e2e.test_up_end_to_end import LORA_JOB, _job_processes, _wait_for_first_step

pytestmark = [pytest.mark.torchrun]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_job_runs_with_postgresql_and_a_redis_broker(tmp_path, postgres_url):
    # A queue of this test's own, so a message left in Redis by anything else is never ours.
    redis_url = REDIS_URL.rsplit("/", 1)[0] + "/15"
    _flush_redis(redis_url)
    env = {"TUNEDECK_DATABASE_URL": postgres_url, "TUNEDECK_BROKER_URL": redis_url}
    with running_tunedeck(tmp_path / "home", extra_env=env) as server:
        job_id = server.submit({**LORA_JOB, "name": "pg-redis", "backend": "fsdp", "max_steps": 6})
        job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
        assert job["status"] == "succeeded", job["error"]
        assert len(server.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]) == 6
    engine = create_engine(postgres_url)
    with engine.connect() as connection:  # the record is in PostgreSQL, not in a local file
        assert connection.execute(text("select status from jobs where id = :id"),
                                  {"id": job_id}).scalar() == "succeeded"
        assert connection.execute(text("select count(*) from metric_points where job_id = :id"),
                                  {"id": job_id}).scalar() >= 12
    engine.dispose()
    assert not (tmp_path / "home" / "tunedeck.db").exists()


def _flush_redis(redis_url: str) -> None:
    import redis

    redis.Redis.from_url(redis_url).flushdb()


def test_killing_the_worker_leaves_no_process_and_the_next_worker_settles_the_job(tmp_path):
    home = tmp_path / "home"
    with running_tunedeck(home) as server:
        job_id = server.submit({**LORA_JOB, "name": "worker-killed", "max_steps": 100000})
        _wait_for_first_step(server, job_id)
        launched = _job_processes(server, job_id)
        assert len(launched) == 3  # torchrun and 2 ranks (forked by the warm launcher)
        _worker_process(server).send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 60
        while _any_alive(launched) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _any_alive(launched)  # (the web stopped with its worker: no API to ask)
    with running_tunedeck(home) as restarted:  # same database, a new worker on this host
        job = restarted.wait_for(job_id, {"failed", "succeeded", "cancelled"}, timeout_seconds=60)
        assert job["status"] == "failed" and job["error"].startswith("worker lost")


def test_stopping_tunedeck_stops_a_running_job_and_says_why(tmp_path):
    home = tmp_path / "home"
    with running_tunedeck(home) as server:
        job_id = server.submit({**LORA_JOB, "name": "stopped-with-up", "max_steps": 100000})
        _wait_for_first_step(server, job_id)
        launched = _job_processes(server, job_id)
        assert launched
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)
        assert not _any_alive(launched)
    with running_tunedeck(home) as restarted:
        job = restarted.job(job_id)
        assert job["status"] == "failed" and "was shut down while the job ran" in job["error"]


def _any_alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            pass
    return False


def _worker_process(server) -> psutil.Process:
    for child in psutil.Process(server.process.pid).children(recursive=True):
        if child.cmdline()[-1:] == ["worker"]:
            return child
    raise AssertionError("no worker process under tunedeck up")
