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


def group_is_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
