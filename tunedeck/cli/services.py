"""The long-running services: a worker, and `up` (web + worker, each its own process)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tunedeck.settings import Settings


def run_worker(*, concurrency: int | None = None) -> int:
    if concurrency is not None:  # before worker.tasks reads the settings: one figure for all
        os.environ["TUNEDECK_WORKER_CONCURRENCY"] = str(concurrency)
    from tunedeck.broker import PREFLIGHT_THREADS
    from tunedeck.cluster.placement import broker_queues_of_worker
    from worker.tasks import celery_app, worker_identity

    identity = worker_identity()
    # Threads, not forked children: the task's thread is the torchrun launcher's parent,
    # so if this process dies, the kernel signals torchrun (PR_SET_PDEATHSIG). Celery's own
    # heartbeats stay off: liveness is the database heartbeat (worker/heartbeat.py). One
    # thread a job slot, and PREFLIGHT_THREADS more that jobs never hold.
    celery_app.worker_main([
        "worker", "--loglevel", "INFO", "--pool", "threads",
        "--concurrency", str(identity.concurrency + PREFLIGHT_THREADS),
        "--queues", ",".join(broker_queues_of_worker(name=identity.name, host=identity.host,
                                                      queues=identity.queues)),
        "--without-mingle", "--without-gossip", "--without-heartbeat",
        "--hostname", f"tunedeck-{identity.name}",
    ])
    return 0


def run_web_and_worker(settings: Settings) -> int:
    """Migrate, then run `tunedeck web` and `tunedeck worker`; stop both when either stops."""
    from tunedeck.migrate import upgrade_database
    from tunedeck.accounts.redaction import redact_url

    upgrade_database(settings.resolved_database_url)
    environment = {**os.environ, "TUNEDECK_HOME": str(settings.home_dir),
                   "GRADIO_ANALYTICS_ENABLED": "False"}
    command = [sys.executable, "-m", "tunedeck.cli"]
    web = subprocess.Popen([*command, "web", "--host", settings.host, "--port", str(settings.port)],
                           env=environment)
    worker = subprocess.Popen([*command, "worker"], env=environment)
    print(f"TuneDeck is starting at http://{settings.host}:{settings.port} "
          f"(data in {settings.home_dir}; database {redact_url(settings.resolved_database_url)}; "
          f"broker {redact_url(settings.resolved_broker_url)})", flush=True)
    return _wait_for_either(web, worker)


def _wait_for_either(*processes: subprocess.Popen) -> int:
    stopping = False

    def stop(_signal_number, _frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping and all(process.poll() is None for process in processes):
        time.sleep(0.5)
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    return 0 if stopping else 1
