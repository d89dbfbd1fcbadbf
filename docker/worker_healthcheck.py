"""The worker container's healthcheck: exit 0 when this host can take a job, 1 otherwise.

A worker needs three things besides its own process (the container's main process, which
takes the container down with it): the database, the broker and at least one GPU; and its
heartbeat must be fresh, which a hung worker's is not. Each check prints what is wrong,
so `docker inspect` says why the worker is unhealthy.
"""
from __future__ import annotations

import sys

from tunedeck.settings import Settings, load_settings

CONNECT_TIMEOUT_SECONDS = 5


def database_problem(settings: Settings) -> str | None:
    from sqlalchemy import create_engine, text

    engine = create_engine(settings.resolved_database_url)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:  # any failure means the same thing: no database
        return f"database {engine.url.render_as_string(hide_password=True)}: {error}"
    finally:
        engine.dispose()
    return None


def broker_problem(settings: Settings) -> str | None:
    from kombu import Connection

    # kombu's Redis transport pings the server when it opens a channel.
    with Connection(settings.resolved_broker_url,
                    connect_timeout=CONNECT_TIMEOUT_SECONDS) as connection:
        try:
            connection.ensure_connection(max_retries=1, timeout=CONNECT_TIMEOUT_SECONDS)
            connection.default_channel
        except Exception as error:
            return f"broker {connection.as_uri()}: {error}"
    return None


def gpu_problem() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # no library, no driver, or no device passed through
        return f"no NVIDIA GPU visible (NVML: {error})"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML sees no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


def heartbeat_problem(settings: Settings, worker_name: str) -> str | None:
    """This worker's row must say online and be younger than the lost-worker limit (its
    heartbeat thread writes it every TUNEDECK_HEARTBEAT_SECONDS)."""
    from datetime import timezone

    from sqlalchemy import create_engine, select

    from tunedeck.db.models import Worker, utc_now

    engine = create_engine(settings.resolved_database_url)
    try:
        with engine.connect() as connection:
            row = connection.execute(select(Worker.state, Worker.last_seen_at)
                                     .where(Worker.name == worker_name)).one_or_none()
    except Exception as error:
        return f"heartbeat of worker {worker_name}: {error}"
    finally:
        engine.dispose()
    if row is None:
        return f"worker {worker_name} has not sent a heartbeat yet"
    state, last_seen = row
    if last_seen.tzinfo is None:  # SQLite gives back the UTC time without its zone
        last_seen = last_seen.replace(tzinfo=timezone.utc)
    silent = (utc_now() - last_seen).total_seconds()
    if state != "online" or silent > settings.worker_lost_seconds:
        return f"worker {worker_name} is {state}, last heartbeat {silent:.0f} s ago"
    return None


def main() -> int:
    from worker.worker_identity import WorkerIdentity

    settings = load_settings()
    name = WorkerIdentity.from_settings(settings).name
    problems = [problem for problem in (database_problem(settings), broker_problem(settings),
                                        gpu_problem(), heartbeat_problem(settings, name))
                if problem]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
