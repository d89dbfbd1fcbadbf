"""What every request a worker answers for the web (a data preflight, a "Try it" generation)
shares in the policy layer: sending the stored row's message, waiting a while for the
worker's result, and reading it back for its owner (or an admin) only. Each kind's own
module (app/actions/preflight.py, generation.py) says who may ask, what is stored and why
a request is still waiting.

The database is the record (there is no Celery result backend): the web inserts the row
pending and polls it; the worker fills in the result or the error.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.actions.errors import NotFound
from app.auth.principal import Principal
from tunedeck.db.engine import Database
from tunedeck.db.request_rows import WorkerRequestColumns
from tunedeck.worker_requests.states import FINISHED
from tunedeck.worker_requests.store import RequestNotFound, RequestStore

log = logging.getLogger(__name__)
# How a waiting reason starts when no live worker would take the request: nothing will
# change while a request waits, so it answers at once.
NO_WORKER = "waiting: no live worker"


@dataclass(frozen=True)
class RequestAnswer:
    row: dict[str, Any]  # the kind's to_dict of the row
    waiting: str | None = None  # why there is no result yet, in words; None once finished

    @property
    def finished(self) -> bool:
        return self.row["status"] in FINISHED

    @property
    def id(self) -> int:
        return self.row["id"]

    def to_json(self) -> dict[str, Any]:
        return {**self.row, "waiting": self.waiting}


def send_or_fail(*, database: Database, store: RequestStore, request_id: int,
                 send: Callable[[], None]) -> None:
    """Send the stored request's message; a broker that cannot be reached fails the row
    (nothing else would ever run it) rather than the caller."""
    try:
        send()
    except Exception:  # noqa: BLE001 - the row says so; the log has the cause
        log.exception("%s %s stored but not sent", store.noun, request_id)
        with database.transaction() as session:
            store.claim(session=session, request_id=request_id, worker_name="web")
            store.fail(session=session, request_id=request_id,
                       error="the broker could not be reached; try again")


def await_request(*, database: Database, store: RequestStore, principal: Principal,
                  request_id: int, wait_seconds: float, poll_seconds: float,
                  waiting_reason: Callable[[Session, Any], str],
                  to_dict: Callable[[Any], dict[str, Any]] | None = None) -> RequestAnswer:
    """The request once finished, or after `wait_seconds` (at once when its reason to wait
    starts with NO_WORKER); NotFound for one missing or not the principal's."""
    to_dict = to_dict or store.to_dict
    deadline = time.monotonic() + wait_seconds
    while True:
        with database.transaction() as session:
            try:
                row = visible_request(session=session, store=store, principal=principal,
                                      request_id=request_id)
            except RequestNotFound as error:
                raise NotFound(str(error)) from error
            waiting = None if row.status in FINISHED else waiting_reason(session, row)
            answer = RequestAnswer(to_dict(row), waiting)
        if answer.finished or waiting.startswith(NO_WORKER) or time.monotonic() >= deadline:
            return answer
        time.sleep(poll_seconds)


def visible_request(*, session: Session, store: RequestStore, principal: Principal,
                    request_id: int) -> WorkerRequestColumns:
    """Another user's request is reported missing, as their jobs are."""
    row = store.get(session=session, request_id=request_id)
    if not principal.may_see_job_of(row.owner):
        raise RequestNotFound(store.noun, request_id)
    return row
