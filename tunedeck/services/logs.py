"""One logging set-up for every TuneDeck service (`web`, `worker`, `up`): readable text by
default, JSON lines with TUNEDECK_LOG_FORMAT=json, each line with the service, and when known
the job id, the worker and the request id it was written for.

The ids travel in context variables: the web's request middleware sets the request id, a
worker's task thread sets the job id (`for_job`), the worker name is set once a process.
A line never carries a secret: the access log (app/request_log.py) writes no header, cookie
or query string, and URLs are redacted where they are logged.
"""
from __future__ import annotations

import contextvars
import json
import logging
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

JOB_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar("tunedeck_job_id", default=None)
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("tunedeck_request_id",
                                                                         default=None)
_worker_name: str | None = None
_service = "tunedeck"
# Chatty libraries kept at WARNING unless TUNEDECK_LOG_LEVEL=DEBUG.
QUIET_LOGGERS = ("httpx", "httpcore", "urllib3", "multipart", "matplotlib", "PIL", "asyncio",
                 "uvicorn.access", "celery.worker.strategy", "kombu", "alembic")


def configure_logging(*, service: str, log_format: str = "text", level: str = "INFO",
                      worker_name: str | None = None) -> None:
    """Route every logger of the process (ours, uvicorn's, Celery's) to one stderr handler."""
    global _service, _worker_name
    _service, _worker_name = service, worker_name
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ContextFilter())
    handler.setFormatter(JsonLines() if log_format == "json" else ReadableText())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "celery"):
        library = logging.getLogger(name)
        library.handlers, library.propagate = [], True
    if level.upper() != "DEBUG":
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def set_worker_name(name: str) -> None:
    global _worker_name
    _worker_name = name


@contextmanager
def for_job(job_id: int) -> Iterator[None]:
    """Lines written in this block (this thread) name the job."""
    token = JOB_ID.set(job_id)
    try:
        yield
    finally:
        JOB_ID.reset(token)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.service = _service
        record.worker = _worker_name
        record.job_id = getattr(record, "job_id", None) or JOB_ID.get()
        record.request_id = getattr(record, "request_id", None) or REQUEST_ID.get()
        return True


class ReadableText(logging.Formatter):
    """`2026-12-03 07:25:00,123 INFO web worker.job_runner: message [job 5 · request 3f2a]`"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(service)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = [f"job {record.job_id}" if record.job_id is not None else None,
                   f"worker {record.worker}" if record.worker else None,
                   f"request {record.request_id}" if record.request_id else None]
        shown = [item for item in context if item]
        return f"{text} [{' · '.join(shown)}]" if shown else text


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, service, logger, message, and
    job_id, worker, request_id when known; an exception as its formatted traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname, "service": record.service, "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("job_id", "worker", "request_id"):
            if getattr(record, key, None) is not None:
                line[key] = getattr(record, key)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
