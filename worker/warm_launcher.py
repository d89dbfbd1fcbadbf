"""The worker's standby launcher: one `python -m trainer.startup.warm_start` kept ready for the next
job, so a job's ranks start from a fork server that imported torch, transformers and peft
ahead of time instead of importing them at launch (trainer/startup/warm_start.py says how).

The standby is what `start_process_group` would have started: its own session, its death
signal tied to the worker, the job's log file as its output; JobProcesses supervises,
cancels and kills it the same way. A job it does not fit (QLoRA, several nodes), a standby
that died, or a worker with warm start off launches cold, with the same argv.
"""
from __future__ import annotations

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

# How long a standby may take to say it took a job on: it answers at once when ready, and
# one still importing answers when its imports end (seconds, well under a cold start's).
ACCEPT_SECONDS = 120.0


def fits_warm_start(spec: JobSpec) -> bool:
    """QLoRA needs bitsandbytes, which the fork server keeps out; a job on several nodes
    launches with the static rendezvous, which the standby is not tried with."""
    return spec.method != "qlora" and spec.num_nodes == 1


class WarmLauncher:
    """At most one standby at a time; `take` hands it a job, `replenish` starts the next."""

    def __init__(self, *, folder: Path, environment: dict[str, str], cwd: Path):
        self.folder = folder
        self.environment = environment
        self.cwd = cwd
        self._lock = threading.Lock()
        self._standby: subprocess.Popen | None = None
        self._ready_file: Path | None = None

    def replenish(self) -> None:
        """Start a standby unless one is alive. It takes seconds of CPU to get ready, so
        call this when the worker is idle (at start, after a job), not as a job starts."""
        with self._lock:
            if self._standby is not None and self._standby.poll() is None:
                return
            ready_file = self.folder / f"standby-{os.getpid()}-{threading.get_ident()}.ready"
            # Its folder is on TUNEDECK_HOME's disk: a full one (or any OSError) costs the
            # next job its warm start, never the worker.
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                remove_stale_ready_files(self.folder)
                ready_file.unlink(missing_ok=True)
                with (self.folder / "standby.log").open("ab") as output:
                    self._standby = subprocess.Popen(
                        installed_module("trainer.startup.warm_start", "--ready-file", str(ready_file)),
                        cwd=self.cwd, env=self.environment, stdin=subprocess.PIPE,
                        stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                        preexec_fn=die_with_worker)
            except OSError:
                log.exception("could not start a standby launcher; jobs start cold")
                self._standby = None
                return
            self._ready_file = ready_file

    def is_ready(self) -> bool:
        """A standby is alive and its fork server has finished importing."""
        with self._lock:
            return (self._standby is not None and self._standby.poll() is None
                    and self._ready_file is not None and self._ready_file.exists())

    def take(self, argv: list[str], *, cwd: Path, env: dict[str, str],
             log_file: Path) -> subprocess.Popen | None:
        """The standby, now running the job (its launcher), or None: launch cold. The
        standby is the job's only once it said so (its accept file): one that dies or
        fails before it has taken the job on leaves it to a cold launch, not failed."""
        with self._lock:
            standby, self._standby = self._standby, None
            ready_file, self._ready_file = self._ready_file, None
        if standby is None or standby.poll() is not None:
            return None
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        accept_file = self.folder / f"standby-{standby.pid}.accepted"
        accept_file.unlink(missing_ok=True)
        request = {"argv": argv, "env": env, "cwd": str(cwd), "log_file": str(log_file),
                   "accept_file": str(accept_file)}
        try:
            standby.stdin.write((json.dumps(request) + "\n").encode())
            standby.stdin.close()
        except OSError:  # it died meanwhile
            _kill_group(standby)
            return None
        deadline = time.monotonic() + ACCEPT_SECONDS
        while not accept_file.exists():
            if standby.poll() is not None or time.monotonic() > deadline:
                log.warning("the standby launcher (pid %d) did not take the job on (exit code "
                            "%s; see %s); starting it cold", standby.pid, standby.poll(),
                            self.folder / "standby.log")
                _kill_group(standby)
                return None
            time.sleep(0.005)
        accept_file.unlink(missing_ok=True)
        return standby

    def stop(self) -> None:
        with self._lock:
            standby, self._standby = self._standby, None
            ready_file, self._ready_file = self._ready_file, None
        if standby is not None:
            _kill_group(standby)
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)


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


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
