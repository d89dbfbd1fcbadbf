"""The long-running services: a worker, and `up` (web + worker, each its own process)."""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Sequence

from tunedeck.settings import Settings


def run_worker(settings: Settings) -> int:
    from tunedeck.services.broker import PREFLIGHT_THREADS
    from tunedeck.cluster.placement import broker_queues_of_worker
    from worker.tasks import build_worker

    from celery.signals import setup_logging

    from tunedeck.services.logs import set_worker_name

    # Any receiver of setup_logging keeps Celery from configuring logging itself: the
    # process's one set-up (tunedeck/services/logs.py) stays.
    setup_logging.connect(lambda **_kwargs: None, weak=False)
    worker = build_worker(settings)
    identity = worker.identity
    set_worker_name(identity.name)
    # Threads, not forked children: the task's thread is the torchrun launcher's parent,
    # so if this process dies, the kernel signals torchrun (PR_SET_PDEATHSIG). Celery's own
    # heartbeats stay off: liveness is the database heartbeat (worker/heartbeat.py). One
    # thread a job slot, and PREFLIGHT_THREADS more that jobs never hold.
    # JSON logs: no banner (Celery prints it to stdout, not through logging).
    quiet = ["--quiet"] if settings.log_format == "json" else []
    worker.celery_app.worker_main([
        *quiet, "worker", "--loglevel", settings.log_level, "--pool", "threads",
        "--concurrency", str(identity.concurrency + PREFLIGHT_THREADS),
        "--queues", ",".join(broker_queues_of_worker(name=identity.name, host=identity.host,
                                                      queues=identity.queues)),
        "--without-mingle", "--without-gossip", "--without-heartbeat",
        "--hostname", f"tunedeck-{identity.name}",
    ])
    return 0


def make_default_data_folder(settings: Settings) -> None:
    """HOME/data, the allowed folder when TUNEDECK_ALLOWED_ROOTS is unset (the form's pickers
    list it), made at start-up so a fresh install has it to copy datasets into. Folders an
    admin named are theirs to make."""
    if settings.allowed_roots is None:
        for root in settings.allowed_root_paths:
            root.mkdir(parents=True, exist_ok=True)


def run_web_and_worker(settings: Settings) -> int:
    """Migrate, then run `tunedeck web`, and once it listens (so it passed its open-access
    check: nothing runs a job while it refuses) `tunedeck worker`; stop both when either
    stops."""
    from tunedeck.accounts.redaction import redact_url
    from tunedeck.services.line_server import installed_module
    from tunedeck.db.migrate import upgrade_database

    upgrade_database(settings.resolved_database_url)
    environment = {**os.environ, "TUNEDECK_HOME": str(settings.home_dir),
                   "GRADIO_ANALYTICS_ENABLED": "False"}
    command = installed_module("cli")  # the worker imports the trainer: never a decoy
    stopping = _stop_on_signals()
    web = subprocess.Popen([*command, "web", "--host", settings.host, "--port", str(settings.port)],
                           env=environment)
    logging.getLogger("tunedeck.up").info(
        "TuneDeck is starting at http://%s:%s (data in %s; database %s; broker %s)",
        settings.host, settings.port, settings.home_dir,
        redact_url(settings.resolved_database_url), redact_url(settings.resolved_broker_url))
    if not _wait_until_listening(web, settings, stopping=stopping):
        return _stop_all([web], stopping=stopping)  # the web said why it stopped
    worker = subprocess.Popen([*command, "worker"], env=environment)
    return _wait_for_either({"web": web, "worker": worker}, stopping=stopping)


def _stop_on_signals() -> threading.Event:
    """Set by SIGTERM and SIGINT: the services are then stopped."""
    stopping = threading.Event()

    def stop(_signal_number, _frame) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return stopping


def _wait_until_listening(web: subprocess.Popen, settings: Settings, *,
                          stopping: threading.Event) -> bool:
    """True once the web accepts connections; False when it exited (or we were told to
    stop) first."""
    address = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}.get(settings.host,
                                                                      settings.host.strip("[]"))
    while not stopping.is_set() and web.poll() is None:
        try:
            with socket.create_connection((address, settings.port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _wait_for_either(processes: dict[str, subprocess.Popen], *, stopping: threading.Event) -> int:
    while not stopping.is_set() and all(process.poll() is None for process in processes.values()):
        time.sleep(0.5)
    # Said once, in `up`'s own log: an operator (or a failing test) sees which service
    # ended the other, and how.
    for name, process in processes.items():
        if process.poll() is not None and not stopping.is_set():
            logging.getLogger("tunedeck.up").error(
                "the %s exited (%s): stopping the other service", name,
                _exit_words(process.returncode))
    return _stop_all(list(processes.values()), stopping=stopping)


def _exit_words(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _stop_all(processes: Sequence[subprocess.Popen], *, stopping: threading.Event) -> int:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    return 0 if stopping.is_set() else 1
