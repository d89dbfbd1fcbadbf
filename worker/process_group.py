"""Launching torchrun in its own session, and making sure none of the job outlives it.

torchrun starts each rank in a session of its own, so the launcher's process group alone
does not reach the ranks: `JobProcesses` also remembers every descendant it has seen.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

PR_SET_PDEATHSIG = 1


def die_with_worker() -> None:
    # Runs in the child between fork and exec: if the worker dies (even by SIGKILL), the
    # kernel SIGKILLs torchrun, and each rank, whose own death signal is SIGKILL too (set
    # first thing in trainer/__main__.py), dies with it. Not SIGTERM: torchrun's graceful
    # shutdown then took more than 45 s in one of many killed-worker tests, and with the
    # worker gone nothing is left for it to report to.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def start_process_group(argv: list[str], *, cwd: Path, env: dict[str, str],
                        log_file: Path) -> subprocess.Popen:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_worker,
        )


def live_group_members(pgid: int) -> list[int]:
    """Pids in the process group that are not zombies (an orphaned zombie may never be
    reaped when PID 1 is not a real init, and it holds no resources anyway)."""
    members = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state, ppid, pgrp, ...
        state, _ppid, group = stat[stat.rfind(")") + 2:].split(" ", 3)[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(stat_file.parent.name))
    return members


class JobProcesses:
    """The launcher and every descendant seen so far (ranks, their helpers)."""

    def __init__(self, launcher: subprocess.Popen):
        self.launcher = launcher
        self._known: dict[int, psutil.Process] = {}
        self.refresh()

    def refresh(self) -> None:
        try:
            launcher = psutil.Process(self.launcher.pid)
            found = [launcher, *launcher.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for process in found:
            self._known.setdefault(process.pid, process)

    def known_pids(self) -> list[int]:
        """Every process seen so far, live or not: cheap (no /proc scan), for the sampler."""
        return list(self._known)

    def alive_pids(self) -> list[int]:
        alive = set(live_group_members(self.launcher.pid))
        for pid, process in self._known.items():
            try:  # is_running also guards against a reused pid
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.add(pid)
            except psutil.NoSuchProcess:
                pass
        return sorted(alive)

    def stop(self, *, grace_seconds: float) -> None:
        """SIGTERM the group and every rank, SIGKILL what is left after the grace period."""
        self.refresh()
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and (self.launcher.poll() is None or self.alive_pids()):
            time.sleep(0.1)
        self.kill()

    def kill(self) -> None:
        """SIGKILL everything of the job that is still alive and reap the launcher."""
        for _ in range(50):
            if not self.alive_pids():
                break
            self._signal_all(signal.SIGKILL)
            time.sleep(0.1)
        if self.launcher.poll() is None:
            self.launcher.wait(timeout=10)

    def _signal_all(self, signal_number: int) -> None:
        try:
            os.killpg(self.launcher.pid, signal_number)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in self.alive_pids():
            try:
                # Known processes go through psutil, which refuses a pid reused meanwhile.
                if pid in self._known:
                    self._known[pid].send_signal(signal_number)
                else:
                    os.kill(pid, signal_number)
            except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
                pass
