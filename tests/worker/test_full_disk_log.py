"""The worker's own log on a full disk (its stderr redirected to a file there, as an
operator's `tunedeck worker 2>>/var/log/...` or `tunedeck up`'s log does): lines that cannot
be written are lost, the worker is not. A real full tmpfs, the worker's real logging set-up."""
from __future__ import annotations

import subprocess
import sys

import pytest

from harness.small_disk import mount_problem, small_disk

pytestmark = pytest.mark.skipif(mount_problem() is not None, reason=str(mount_problem()))

LOGGING_WORKER = """
import logging
from tunedeck.services.logs import configure_logging, for_job

configure_logging(service="worker", worker_name="default@test")
log = logging.getLogger("worker.job_runner")
for number in range(2000):
    with for_job(7):
        log.info("job 7: a line the full disk cannot hold, number %d %s", number, "x" * 200)
print("the worker logged on", flush=True)
"""


def test_a_worker_whose_log_disk_is_full_keeps_running(tmp_path):
    with small_disk(tmp_path / "logs", 64 * 1024) as disk:
        log_file = disk.path / "worker.log"
        with log_file.open("ab") as stderr:
            finished = subprocess.run([sys.executable, "-c", LOGGING_WORKER], stderr=stderr,
                                      stdout=subprocess.PIPE, text=True, timeout=120)
        assert disk.free_bytes < 4096  # the log filled the disk
        written = log_file.read_text(errors="replace")
    assert (finished.returncode, finished.stdout) == (0, "the worker logged on\n")
    assert "job 7: a line the full disk cannot hold, number 0 " in written
