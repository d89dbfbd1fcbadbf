"""Data preflights, one policy for the REST API and the New job form: who may ask (any
signed-in principal, for paths they could submit, trust_remote_code for admins only), what
is stored (the request, sent to a worker that would run such a job), and why it still
waits; sending, waiting and reading back are every worker request's
(app/actions/worker_requests.py).
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from app.actions.errors import Invalid
from app.actions.worker_requests import (NO_WORKER, RequestAnswer, await_request,
                                         send_or_fail)
from app.auth.job_access import owner_for_new_job
from app.auth.principal import Principal
from app.auth.spec_access import spec_access_problems
from tunedeck.accounts import audit
from tunedeck.services.broker import send_preflight
from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.placement import job_queue, serves
from tunedeck.data.preflight_request import PreflightRequest
from tunedeck.data.preflight_store import PREFLIGHTS
from tunedeck.db.engine import Database
from tunedeck.db.request_rows import DatasetPreflight
from tunedeck.settings import Settings
from tunedeck.worker_requests.states import PENDING

# How long a request waits for the report before answering "still running" (202): a
# preflight takes seconds on a worker (bench/preflight.py); its first one also loads the
# tokenizer libraries.
WAIT_SECONDS = 30.0
POLL_SECONDS = 0.2


class PreflightRefused(Invalid):
    """The principal may not have this data read; one problem a field of the request."""


def start_preflight(*, database: Database, celery_app, settings: Settings, principal: Principal,
                    request: PreflightRequest, client: str | None = None) -> int:
    """The new preflight's id, its request stored, audited and sent; PreflightRefused (an
    Invalid, by field) for data the principal may not have read."""
    problems = spec_access_problems(request.to_spec(), principal=principal, settings=settings)
    if problems:
        raise PreflightRefused.of_fields(problems)
    with database.transaction() as session:
        preflight = PREFLIGHTS.create(session=session, request=request,
                                      owner=owner_for_new_job(principal))
        audit.record(session=session, actor=principal.name, action=audit.PREFLIGHT,
                     detail=f"preflight {preflight.id}: dataset {request.dataset}", client=client)
        preflight_id = preflight.id
    send_or_fail(database=database, store=PREFLIGHTS, request_id=preflight_id,
                 send=lambda: send_preflight(celery_app, preflight_id, request))
    return preflight_id


def await_preflight(*, database: Database, settings: Settings, principal: Principal,
                    preflight_id: int, wait_seconds: float = WAIT_SECONDS) -> RequestAnswer:
    """The preflight once finished, or after `wait_seconds` (at once when no live worker
    serves its queue); NotFound for one that is missing or the principal may not see."""
    return await_request(database=database, store=PREFLIGHTS, principal=principal,
                         request_id=preflight_id, wait_seconds=wait_seconds,
                         poll_seconds=POLL_SECONDS,
                         waiting_reason=lambda session, preflight: _waiting_reason(
                             session, preflight, settings))


def _waiting_reason(session: Session, preflight: DatasetPreflight, settings: Settings) -> str:
    workers = worker_registry.live_worker_views(session=session,
                                                silent_seconds=settings.worker_lost_seconds)
    if preflight.status != PENDING:
        if any(worker.name == preflight.worker_name for worker in workers):
            return f"running on worker {preflight.worker_name}"
        return (f"{NO_WORKER} serves it: worker {preflight.worker_name} took it and has stopped "
                "answering; check the data again")
    request = PreflightRequest.model_validate(preflight.request)
    where = f"host {request.host}" if request.host else f"queue {job_queue(request)!r}"
    if not any(serves(worker, request) for worker in workers):
        return (f"{NO_WORKER} serves {where}; the preflight runs when one starts (it reads the "
                "data where a job would)")
    return f"waiting for a worker of {where}"
