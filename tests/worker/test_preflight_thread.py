"""A worker's Celery pool has a thread more than its job slots (tunedeck.services.broker.
PREFLIGHT_THREADS), so a data preflight is served while every slot runs a job; the slots
themselves, what claims count, stay the job count (tests/e2e/test_preflight_end_to_end.py
shows a preflight served while a job holds the only slot)."""
import subprocess
import sys

from harness.services import REPO

STARTS_A_WORKER = """
import json
from celery import Celery
Celery.worker_main = lambda app, argv: print(json.dumps(argv))
from cli.services import run_worker
from tunedeck.settings import load_settings
from worker.worker_identity import WorkerIdentity
run_worker(load_settings())
print(WorkerIdentity.from_settings(load_settings()).concurrency)
"""


def test_the_pool_has_one_thread_more_than_the_job_slots(tmp_path):
    import json

    result = subprocess.run([sys.executable, "-c", STARTS_A_WORKER], cwd=REPO, text=True,
                            capture_output=True, timeout=120,
                            env={"TUNEDECK_HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                                 "TUNEDECK_WORKER_GPUS": "",
                                 "TUNEDECK_WORKER_CONCURRENCY": "2"})
    assert result.returncode == 0, result.stderr
    argv_line, slots = result.stdout.splitlines()[-2:]
    argv = json.loads(argv_line)
    assert argv[argv.index("--pool") + 1] == "threads"
    assert argv[argv.index("--concurrency") + 1] == "3" and slots == "2"
