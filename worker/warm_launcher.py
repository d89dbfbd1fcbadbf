"""The worker's warm launcher: one `python -m trainer.startup.warm_start` that imported torch,
transformers and peft (and, on a host without NVIDIA GPUs, DeepSpeed) once, and forks each
job's torchrun from there, so a job's ranks start without importing them
(trainer/startup/warm_start.py says how).

It is started as `start_process_group` would start a job's torchrun: its own session, its
death signal tied to the worker. Each job's launcher is its child, in a session of its own,
supervised through a `ForkedLauncher` (the pid, exit code and waits of a `Popen`):
JobProcesses cancels and kills it the same way. A job it does not fit (QLoRA, several
nodes), a warm launcher that died or is still importing past ACCEPT_SECONDS, or a worker
with warm start off launches cold, with the same argv.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from tunedeck.spec.job_spec import JobSpec
from tunedeck.services.line_server import installed_module
from worker.process_group import die_with_worker

log = logging.getLogger(__name__)

# How long the warm launcher may take to say it took a job on: it answers at once when
# ready, and one still importing answers when its imports end (seconds, well under a cold
# start's).
ACCEPT_SECONDS = 120.0


def fits_warm_start(spec: JobSpec) -> bool:
    """QLoRA needs bitsandbytes, which the warm launcher keeps out; a job on several nodes
    launches with the static rendezvous, which the warm launcher is not tried with."""
    return spec.method != "qlora" and spec.num_nodes == 1


class ForkedLauncher:
    """A job's torchrun forked by the warm launcher: what the worker reads of a Popen."""

    def __init__(self, pid: int, answers: "_Answers", request_id: int):
        self.pid = pid
        self._answers = answers
        self._request_id = request_id
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._answers.exit_code(self._request_id, timeout_seconds=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._answers.exit_code(self._request_id, timeout_seconds=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"warm launcher child {self.pid}", timeout)
        return self.returncode


class _Answers:
    """What the warm launcher said of each request (its child's pid, then exit code), read
    from its stdout by one thread; when it is gone, every child it had is gone too
    (their death signal), and reads as killed."""

    def __init__(self, output):
        self._answers: dict[int, dict] = {}
        self._ended = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(output,), daemon=True,
                         name="warm-launcher-answers").start()

    def _read(self, output) -> None:
        try:
            for line in output:
                answer = json.loads(line)
                with self._changed:
                    self._answers.setdefault(answer["id"], {}).update(answer)
                    self._changed.notify_all()
        except (OSError, ValueError):
            log.exception("the warm launcher's answers could not be read")
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def _wait(self, request_id: int, key: str, timeout_seconds: float | None) -> dict:
        with self._changed:
            self._changed.wait_for(lambda: key in self._answers.get(request_id, {}) or self._ended,
                                   timeout_seconds)
            return self._answers.get(request_id, {})

    def pid(self, request_id: int, timeout_seconds: float) -> int | None:
        return self._wait(request_id, "pid", timeout_seconds).get("pid")

    def exit_code(self, request_id: int, timeout_seconds: float | None) -> int | None:
        answer = self._wait(request_id, "exit", timeout_seconds)
        if "exit" in answer:
            return answer["exit"]
        return -signal.SIGKILL if self._ended and "pid" in answer else None


class WarmLauncher:
    """One warm launcher a worker: `replenish` starts it unless it is alive, `take` forks a
    job's torchrun from it, `stop` ends it."""

    def __init__(self, *, folder: Path, environment: dict[str, str], cwd: Path):
        self.folder = folder
        self.environment = environment
        self.cwd = cwd
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._server: subprocess.Popen | None = None
        self._answers: _Answers | None = None
        self._ready_file: Path | None = None

    def replenish(self) -> None:
        """Start the warm launcher unless it is alive. It takes seconds of CPU to get ready,
        so call this when the worker is idle (at start, after a job)."""
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                return
            ready_file = self.folder / f"standby-{os.getpid()}-{threading.get_ident()}.ready"
            # Its folder is on TUNEDECK_HOME's disk: a full one (or any OSError) costs the
            # jobs their warm start, never the worker.
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                remove_stale_ready_files(self.folder)
                ready_file.unlink(missing_ok=True)
                with (self.folder / "standby.log").open("ab") as output:
                    self._server = subprocess.Popen(
                        installed_module("trainer.startup.warm_start", "--ready-file", str(ready_file)),
                        cwd=self.cwd, env=self.environment, stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=output, start_new_session=True,
                        preexec_fn=die_with_worker)
            except OSError:
                log.exception("could not start the warm launcher; jobs start cold")
                self._server = None
                return
            self._answers = _Answers(self._server.stdout)
            self._ready_file = ready_file

    def is_ready(self) -> bool:
        """The warm launcher is alive and has finished importing."""
        with self._lock:
            return (self._server is not None and self._server.poll() is None
                    and self._ready_file is not None and self._ready_file.exists())

    def take(self, argv: list[str], *, cwd: Path, env: dict[str, str],
             log_file: Path) -> ForkedLauncher | None:
        """The job's torchrun, forked from the warm launcher, or None: launch cold. The
        child is the job's only once it said so (its accept file): one that fails before it
        has taken the job on leaves it to a cold launch, not failed."""
        with self._lock:
            server, answers = self._server, self._answers
            request_id = next(self._ids)
        if server is None or answers is None or server.poll() is not None:
            return None
        log_file.parent.mkdir(parents=True, exist_ok=True)
        accept_file = self.folder / f"launch-{os.getpid()}-{request_id}.accepted"
        accept_file.unlink(missing_ok=True)
        request = {"id": request_id, "launch": {"argv": argv, "env": env, "cwd": str(cwd),
                                                "log_file": str(log_file),
                                                "accept_file": str(accept_file)}}
        try:
            with self._lock:
                server.stdin.write((json.dumps(request) + "\n").encode())
                server.stdin.flush()
        except OSError:  # it died meanwhile
            return None
        pid = answers.pid(request_id, ACCEPT_SECONDS)
        if pid is None:
            log.warning("the warm launcher (pid %d) did not fork the job's launcher (exit code "
                        "%s; see %s); starting it cold", server.pid, server.poll(),
                        self.folder / "standby.log")
            self._restart(server)
            return None
        launcher = ForkedLauncher(pid, answers, request_id)
        deadline = time.monotonic() + ACCEPT_SECONDS
        while not accept_file.exists():
            if launcher.poll() is not None or time.monotonic() > deadline:
                log.warning("the warm launcher's child (pid %d) did not take the job on (exit "
                            "code %s; see %s); starting it cold", pid, launcher.poll(), log_file)
                _kill_group(pid)
                return None
            time.sleep(0.005)
        accept_file.unlink(missing_ok=True)
        return launcher

    def _restart(self, server: subprocess.Popen) -> None:
        """A warm launcher that does not answer is ended; the next `replenish` starts another."""
        _kill_group(server.pid)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self) -> None:
        """No more jobs: the warm launcher exits once the launchers it forked have, so a
        shutting-down worker's jobs are stopped by their own supervision (and judged as
        stopped by the shutdown), not killed with their parent."""
        with self._lock:
            server, self._server = self._server, None
            ready_file, self._ready_file = self._ready_file, None
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
        if server is None:
            return
        try:
            server.stdin.close()
        except OSError:
            pass
        try:
            server.wait(timeout=1)  # at once when no job of it runs
        except subprocess.TimeoutExpired:
            pass


def remove_stale_ready_files(folder: Path) -> None:
    """Remove the ready files of standbys that are gone: a worker killed without its stop
    (SIGKILL, a crash) leaves its standby's behind. Each holds its standby's pid."""
    for ready_file in folder.glob("standby-*.ready"):
        try:
            pid = int(ready_file.read_text())
        except (OSError, ValueError):  # being written, or gone meanwhile
            continue
        if not psutil.pid_exists(pid):
            ready_file.unlink(missing_ok=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
