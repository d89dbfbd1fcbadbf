"""Data preflights, one policy for the REST API and the New job form: who may ask (any
signed-in principal, for paths they could submit, trust_remote_code for admins only),
storing the request and sending it to a worker that would run such a job, waiting a
while for the worker's report, and reading it back for its owner (or an admin) only.

The database is the record (there is no Celery result backend): the web inserts the row
pending and polls it; the worker fills in the report or the error.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.actions.errors import Invalid, NotFound
from app.auth.job_access import owner_for_new_job
from app.auth.principal import Principal
from app.auth.spec_access import spec_access_problems
from tunedeck.accounts import audit
from tunedeck.broker import send_preflight
from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.placement import job_queue, serves
from tunedeck.data import preflight_store
from tunedeck.data.preflight_request import FINISHED, PENDING, PreflightRequest
from tunedeck.db.engine import Database
from tunedeck.db.models import DatasetPreflight
from tunedeck.settings import Settings

log = logging.getLogger(__name__)

# How long a request waits for the report before answering "still running" (202): a
# preflight takes seconds on a worker (bench/preflight.py); its first one also loads the
# tokenizer libraries.
WAIT_SECONDS = 30.0
POLL_SECONDS = 0.2
NO_WORKER = "waiting: no live worker serves"  # then nothing will change while a request waits


class PreflightRefused(Invalid):
    """The principal may not have this data read; one problem a field of the request."""


@dataclass(frozen=True)
class PreflightAnswer:
    preflight: dict[str, Any]  # tunedeck.data.preflight_store.preflight_to_dict
    waiting: str | None = None  # why there is no report yet, in words; None once finished

    @property
    def finished(self) -> bool:
        return self.preflight["status"] in FINISHED

    def to_json(self) -> dict[str, Any]:
        return {**self.preflight, "waiting": self.waiting}


def start_preflight(*, database: Database, celery_app, settings: Settings, principal: Principal,
                    request: PreflightRequest, client: str | None = None) -> int:
    """The new preflight's id, its request stored, audited and sent; PreflightRefused (an
    Invalid, by field) for data the principal may not have read."""
    problems = spec_access_problems(request.to_spec(), principal=principal, settings=settings)
    if problems:
        raise PreflightRefused.of_fields(problems)
    with database.transaction() as session:
        preflight = preflight_store.create_preflight(session=session, request=request,
                                                     owner=owner_for_new_job(principal))
        audit.record(session=session, actor=principal.name, action=audit.PREFLIGHT,
                     detail=f"preflight {preflight.id}: dataset {request.dataset}", client=client)
    try:
        send_preflight(celery_app, preflight.id, request)
    except Exception:  # noqa: BLE001 - the row says so; nothing else would ever run it
        log.exception("preflight %s stored but not sent", preflight.id)
        with database.transaction() as session:
            preflight_store.claim_preflight(session=session, preflight_id=preflight.id,
                                            worker_name="web")
            preflight_store.fail_preflight(session=session, preflight_id=preflight.id,
                                           error="the broker could not be reached; try again")
    return preflight.id


def await_preflight(*, database: Database, settings: Settings, principal: Principal,
                    preflight_id: int, wait_seconds: float = WAIT_SECONDS) -> PreflightAnswer:
    """The preflight once finished, or after `wait_seconds` (at once when no live worker
    serves its queue); NotFound for one that is missing or the principal may not see."""
    deadline = time.monotonic() + wait_seconds
    while True:
        with database.transaction() as session:
            try:
                preflight = visible_preflight(session=session, principal=principal,
                                              preflight_id=preflight_id)
            except preflight_store.PreflightNotFound as error:
                raise NotFound(str(error)) from error
            waiting = None if preflight.status in FINISHED else _waiting_reason(
                session, preflight, settings)
            answer = PreflightAnswer(preflight_store.preflight_to_dict(preflight), waiting)
        if answer.finished or waiting.startswith(NO_WORKER) or time.monotonic() >= deadline:
            return answer
        time.sleep(POLL_SECONDS)


def visible_preflight(*, session: Session, principal: Principal,
                      preflight_id: int) -> DatasetPreflight:
    """Another user's preflight is reported missing, as their jobs are."""
    preflight = preflight_store.get_preflight(session=session, preflight_id=preflight_id)
    if not principal.may_see_job_of(preflight.owner):
        raise preflight_store.PreflightNotFound(preflight_id)
    return preflight


def _waiting_reason(session: Session, preflight: DatasetPreflight, settings: Settings) -> str:
    workers = worker_registry.live_worker_views(session=session,
                                                silent_seconds=settings.worker_lost_seconds)
    if preflight.status != PENDING:
        if any(worker.name == preflight.worker_name for worker in workers):
            return f"running on worker {preflight.worker_name}"
        return (f"{NO_WORKER} it: worker {preflight.worker_name} took it and has stopped "
                "answering; check the data again")
    request = PreflightRequest.model_validate(preflight.request)
    where = f"host {request.host}" if request.host else f"queue {job_queue(request)!r}"
    if not any(serves(worker, request) for worker in workers):
        return (f"{NO_WORKER} {where}; the preflight runs when one starts (it reads the "
                "data where a job would)")
    return f"waiting for a worker of {where}"
