"""The dataset_preflights table: the only writers of a preflight's status.

pending (the web stored the request) -> running (one worker claimed it, by a conditional
UPDATE, so a message delivered twice runs once) -> done (with its report) or failed (with
the error). The caller owns the transaction.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from tunedeck.data.preflight_request import DONE, FAILED, PENDING, RUNNING, PreflightRequest
from tunedeck.db.models import DatasetPreflight, utc_now

ERROR_CHARS = 4000


class PreflightNotFound(Exception):
    def __init__(self, preflight_id: int):
        super().__init__(f"preflight {preflight_id} does not exist")
        self.preflight_id = preflight_id


def create_preflight(*, session: Session, request: PreflightRequest,
                     owner: str | None) -> DatasetPreflight:
    preflight = DatasetPreflight(status=PENDING, request=request.model_dump(mode="json"),
                                 owner=owner)
    session.add(preflight)
    session.flush()
    return preflight


def get_preflight(*, session: Session, preflight_id: int) -> DatasetPreflight:
    preflight = session.get(DatasetPreflight, preflight_id, populate_existing=True)
    if preflight is None:
        raise PreflightNotFound(preflight_id)
    return preflight


def claim_preflight(*, session: Session, preflight_id: int,
                    worker_name: str) -> DatasetPreflight | None:
    """The row, now running on `worker_name`; None unless it was pending."""
    claimed = session.execute(
        update(DatasetPreflight)
        .where(DatasetPreflight.id == preflight_id, DatasetPreflight.status == PENDING)
        .values(status=RUNNING, worker_name=worker_name, started_at=utc_now())
        .execution_options(synchronize_session=False))
    return get_preflight(session=session, preflight_id=preflight_id) if claimed.rowcount else None


def finish_preflight(*, session: Session, preflight_id: int, report: dict[str, Any]) -> None:
    _settle(session, preflight_id, status=DONE, report=report)


def fail_preflight(*, session: Session, preflight_id: int, error: str) -> None:
    _settle(session, preflight_id, status=FAILED, error=error[:ERROR_CHARS])


def _settle(session: Session, preflight_id: int, **values: Any) -> None:
    session.execute(
        update(DatasetPreflight)
        .where(DatasetPreflight.id == preflight_id, DatasetPreflight.status == RUNNING)
        .values(finished_at=utc_now(), **values)
        .execution_options(synchronize_session=False))


def preflight_to_dict(preflight: DatasetPreflight) -> dict[str, Any]:
    def when(moment):
        return moment.isoformat() if moment is not None else None

    return {"id": preflight.id, "status": preflight.status, "request": preflight.request,
            "worker_name": preflight.worker_name, "report": preflight.report,
            "error": preflight.error, "created_at": when(preflight.created_at),
            "started_at": when(preflight.started_at), "finished_at": when(preflight.finished_at)}
