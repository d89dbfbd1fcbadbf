"""Long-running `tunedeck` services (`web`, `worker`) as child processes, and their stop.

No HTTP client here (harness/servers.py has the waits that need one): `bench/gpu_e2e.py`
starts a worker with this on a GPU host that has none of the web's packages.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from worker.process_group import live_group_members

REPO = Path(__file__).resolve().parents[1]


def stop_service(process: subprocess.Popen) -> None:
    """SIGTERM, 40 s for a graceful stop, then SIGKILL to whatever of its group is left."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            pass
    for pid in live_group_members(process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if process.poll() is None:
        process.wait(timeout=10)


@contextmanager
def running_service(command: list[str], *, home: Path, env: dict[str, str], log_name: str,
                    cwd: Path = REPO) -> Iterator[subprocess.Popen]:
    """One long-running `tunedeck` service (`web`, `worker`) in its own session, as a team
    set-up runs them: each its own process, sharing the database, the broker and
    TUNEDECK_HOME. Stopped (and every process of it gone) afterwards."""
    full_env = {**os.environ, "TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
                "OMP_NUM_THREADS": "1", **env}
    home.mkdir(parents=True, exist_ok=True)
    log = (home / log_name).open("ab")
    process = subprocess.Popen([sys.executable, "-m", "cli", *command], cwd=cwd,
                               env=full_env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        yield process
    finally:
        stop_service(process)
        log.close()
