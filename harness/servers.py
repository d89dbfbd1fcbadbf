"""Starting and stopping real servers for end-to-end, browser and chaos tests: `tunedeck up`,
its services (`web`, `worker`) one by one, a private redis-server; and the waits on them."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from harness.services import REPO, running_service, stop_service
from tunedeck.services.line_server import installed_module


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _ServerClient(httpx.Client):
    """An HTTP client whose connection failures say what became of the server: whether
    the `tunedeck up` process is still alive, and the end of its logs (a refused
    connection alone says nothing about why the web went away)."""

    def __init__(self, server: "RunningServer", **options):
        super().__init__(**options)
        self._server = server

    def send(self, request, **options):
        try:
            return super().send(request, **options)
        except httpx.TransportError as error:
            raise AssertionError(f"{request.method} {request.url}: {error!r}; "
                                 f"{self._server.describe()}") from error


class RunningServer:
    def __init__(self, process: subprocess.Popen, base_url: str, home: Path):
        self.process, self.base_url, self.home = process, base_url, home
        self.http = _ServerClient(self, base_url=base_url, timeout=60)

    def describe(self) -> str:
        returncode = self.process.poll()
        state = "still running" if returncode is None else f"exited with {returncode}"
        logs = "".join(f"\n--- {log.name} ---\n{log.read_text(errors='replace')[-4000:]}"
                       for log in sorted(self.home.glob("*.log")))
        return f"the server process is {state}{logs}"

    def submit(self, spec: dict) -> int:
        response = self.http.post("/api/jobs", json=spec)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def job(self, job_id: int) -> dict:
        return self.http.get(f"/api/jobs/{job_id}").json()

    def wait_for(self, job_id: int, statuses: set[str], timeout_seconds: float = 300,
                 poll_seconds: float = 0.5) -> dict:
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["status"] in statuses:
                return job
            assert self.process.poll() is None, "tunedeck up exited"
            time.sleep(poll_seconds)
        raise AssertionError(f"job {job_id} still {self.job(job_id)['status']} after "
                             f"{timeout_seconds}s; log: {self.log_tail(job_id)}")

    def log_tail(self, job_id: int) -> list[str]:
        return self.http.get(f"/api/jobs/{job_id}/logs", params={"lines": 40}).json()["lines"]


def add_account(home: Path, name: str, password: str, *, admin: bool = False,
                extra_env: dict[str, str] | None = None) -> str:
    """An account made the way an operator makes one (`tunedeck user add`, then `tunedeck
    token create`) in the database of `home`; returns the account's API token."""
    env = {**os.environ, "TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
           **(extra_env or {})}
    command = [sys.executable, "-m", "cli"]
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run([*command, "migrate"], env=env, check=True, capture_output=True)
    subprocess.run([*command, "user", "add", name, "--password-stdin", *(["--admin"] if admin else [])],
                   env=env, input=password + "\n", text=True, check=True, capture_output=True)
    created = subprocess.run([*command, "token", "create", name, "--label", "tests"], env=env,
                             text=True, check=True, capture_output=True)
    return created.stdout.strip()


FAKE_TRAINER_PATH = REPO / "bench" / "fake_trainer"


def stand_in_trainer_environment(module: str, folder: Path = REPO) -> dict[str, str]:
    """For `running_tunedeck`'s `extra_env`: the ranks run `python -m module`, found in
    `folder` (put before the inherited PYTHONPATH), instead of TuneDeck's trainer."""
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {"TUNEDECK_TRAINER_MODULE": module, "PYTHONPATH": path}


def fake_trainer_environment() -> dict[str, str]:
    """The ranks run bench/fake_trainer (a step line every FAKE_TRAINER_STEP_SECONDS, no
    model). With no model to import ahead of a job, the warm start is off."""
    return {**stand_in_trainer_environment("fake_trainer", FAKE_TRAINER_PATH),
            "TUNEDECK_WARM_START": "false"}


@contextmanager
def running_tunedeck(home: Path, *, extra_env: dict[str, str] | None = None, cwd: Path = REPO,
                     startup_seconds: float = 120, token: str | None = None) -> Iterator[RunningServer]:
    """`tunedeck up` on a free port with its own TUNEDECK_HOME; everything of it is gone after.
    `cwd` is the folder it runs in (its ranks' too; it cannot replace the trainer). With
    `token` (see `add_account`), the server's `http` client sends it."""
    port = free_port()
    env = {**os.environ, "TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
           "OMP_NUM_THREADS": "1", **(extra_env or {})}
    home.mkdir(parents=True, exist_ok=True)
    log = (home / "up.log").open("ab")
    # As the `tunedeck` script runs: the folder it starts in is not on sys.path.
    process = subprocess.Popen(installed_module("cli", "up", "--port", str(port)),
                               cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    server = RunningServer(process, f"http://127.0.0.1:{port}", home)
    if token is not None:
        server.http.headers["Authorization"] = f"Bearer {token}"
    try:
        _wait_until_healthy(server, startup_seconds)
        yield server
    finally:
        stop_service(process)
        log.close()


def _wait_until_healthy(server: RunningServer, timeout_seconds: float) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError("tunedeck exited: " + server.describe())
        try:
            if server.http.get("/healthz").status_code == 200:
                return
        except (httpx.HTTPError, AssertionError):  # not listening yet
            pass
        time.sleep(0.5)
    raise AssertionError("tunedeck up did not answer /healthz in time")


@contextmanager
def running_web(home: Path, *, env: dict[str, str],
                startup_seconds: float = 120) -> Iterator[RunningServer]:
    """`tunedeck web` alone on a free port (its workers are started separately)."""
    port = free_port()
    with running_service(["web", "--port", str(port)], home=home, env=env,
                         log_name="web.log") as process:
        server = RunningServer(process, f"http://127.0.0.1:{port}", home)
        _wait_until_healthy(server, startup_seconds)
        yield server


class RedisServer:
    """A redis-server of the test's own on a free port, keeping nothing on disk: a restart
    loses every message, the worst case for queued jobs."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self._process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url).ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.1)
        raise AssertionError("redis-server did not start")

    def kill(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)


@contextmanager
def private_redis() -> Iterator["RedisServer"]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_for_workers(web: RunningServer, names: set[str], timeout_seconds: float = 90) -> dict:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        workers = {worker["name"]: worker for worker in web.http.get("/api/workers").json()["workers"]
                   if worker["state"] == "online"}
        if names <= set(workers):
            return workers
        time.sleep(0.5)
    raise AssertionError(f"workers {names} did not report: {web.http.get('/api/workers').json()}")


def wait_until(condition, timeout_seconds: float, what: str):
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_steps(web: RunningServer, job_id: int, steps: int, timeout_seconds: float = 180):
    wait_until(lambda: len(web.http.get(f"/api/jobs/{job_id}/metrics",
                                        params={"max_points": 100000}).json()["train"]) >= steps,
               timeout_seconds, f"job {job_id} to log {steps} steps")
