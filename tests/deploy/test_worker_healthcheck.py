"""docker/worker_healthcheck.py, the compose worker's healthcheck, run as Docker runs it:
healthy only when the database and the broker answer, a GPU is visible, and this worker's
heartbeat is fresh."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.conftest import REDIS_URL
from tests.deploy.compose_file import REPO
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.engine import Database
from tunedeck.db.models import utc_now
from tunedeck.db.migrate import upgrade_database

SCRIPT = REPO / "docker" / "worker_healthcheck.py"


def run_healthcheck(*, database_url: str, broker_url: str, home) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True,
                          timeout=60,
                          env={"TUNEDECK_HOME": str(home), "TUNEDECK_DATABASE_URL": database_url,
                               "TUNEDECK_BROKER_URL": broker_url, "PATH": "/usr/bin:/bin"})


def host_has_an_nvidia_gpu() -> bool:
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listing.returncode == 0 and "GPU" in listing.stdout


def test_a_worker_without_database_and_broker_is_unhealthy(tmp_path):
    result = run_healthcheck(database_url="postgresql+psycopg://postgres@127.0.0.1:1/none",
                             broker_url="redis://127.0.0.1:1/0", home=tmp_path)
    assert result.returncode == 1
    assert "database postgresql+psycopg://postgres@127.0.0.1:1/none" in result.stderr
    assert "broker redis://" in result.stderr


@pytest.mark.redis
def test_with_database_and_broker_up_the_gpu_and_the_heartbeat_decide(tmp_path):
    url = f"sqlite:///{tmp_path / 'tunedeck.db'}"
    upgrade_database(url)
    result = run_healthcheck(database_url=url, broker_url=REDIS_URL, home=tmp_path)
    assert "database" not in result.stderr and "broker" not in result.stderr, result.stderr
    assert result.returncode == 1
    assert f"worker {socket.gethostname()}-default has not sent a heartbeat yet" in result.stderr
    if not host_has_an_nvidia_gpu():
        assert "no NVIDIA GPU visible" in result.stderr or "NVML sees no GPU" in result.stderr
    database = Database(url)
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name=f"{socket.gethostname()}-default", host=socket.gethostname(),
            queues=["default"], pid=1, concurrency=1, resources={"gpus": None},
            started_at=utc_now())
    database.dispose()
    result = run_healthcheck(database_url=url, broker_url=REDIS_URL, home=tmp_path)
    assert "heartbeat" not in result.stderr, result.stderr
    assert result.returncode == (0 if host_has_an_nvidia_gpu() else 1), result.stderr
