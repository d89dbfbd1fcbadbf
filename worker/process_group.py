"""Launching torchrun in its own process group, and making sure none of it outlives us."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the worker dies (even by SIGKILL), the
    # kernel sends torchrun SIGTERM, and torchrun takes its ranks down with it.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def start_process_group(argv: list[str], *, cwd: Path, env: dict[str, str],
                        log_file: Path) -> subprocess.Popen:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
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


def group_is_alive(pgid: int) -> bool:
    if not Path("/proc/self/stat").exists():  # not Linux: ask the kernel directly
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    return bool(live_group_members(pgid))


def stop_process_group(process: subprocess.Popen, *, grace_seconds: float) -> None:
    """SIGTERM the whole group, SIGKILL what is left after the grace period."""
    pgid = process.pid  # start_new_session made the launcher its group's leader
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and (process.poll() is None or group_is_alive(pgid)):
        time.sleep(0.1)
    kill_process_group(process)


def kill_process_group(process: subprocess.Popen) -> None:
    """SIGKILL every process left in the group and reap the launcher."""
    pgid = process.pid
    for _ in range(50):
        if not group_is_alive(pgid):
            break
        _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.1)
    if process.poll() is None:
        process.wait(timeout=10)


def _signal_group(pgid: int, signal_number: int) -> None:
    try:
        os.killpg(pgid, signal_number)
    except (ProcessLookupError, PermissionError):
        pass
