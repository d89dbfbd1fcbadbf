"""The only writers of a worker request's status, for any kind of request (a table whose
rows have tunedeck.db.request_rows.WorkerRequestColumns). Each change is one conditional
UPDATE from the state table's sources, so a message delivered twice runs once and a row
that was settled stays settled. The caller owns the transaction."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tunedeck.db.models import utc_now
from tunedeck.db.request_rows import WorkerRequestColumns
from tunedeck.worker_requests.states import DONE, FAILED, PENDING, RUNNING, sources_of

ERROR_CHARS = 4000


class RequestNotFound(Exception):
    def __init__(self, noun: str, request_id: int):
        super().__init__(f"{noun} {request_id} does not exist")
        self.request_id = request_id


@dataclass(frozen=True)
class RequestStore:
    """One kind of request: its row class, the word for it in messages, and the column the
    worker's result goes in."""

    row: type[WorkerRequestColumns]
    noun: str
    result: str

    def create(self, *, session: Session, request: BaseModel, owner: str | None,
               **columns: Any) -> WorkerRequestColumns:
        """A new pending row holding the request (as JSON) and who asked."""
        row = self.row(status=PENDING, request=request.model_dump(mode="json"), owner=owner,
                       **columns)
        session.add(row)
        session.flush()
        return row

    def get(self, *, session: Session, request_id: int) -> WorkerRequestColumns:
        row = session.get(self.row, request_id, populate_existing=True)
        if row is None:
            raise RequestNotFound(self.noun, request_id)
        return row

    def pending_ids(self, *, session: Session, worker_name: str) -> list[int]:
        """The requests waiting for `worker_name`, oldest first."""
        query = select(self.row.id).where(self.row.worker_name == worker_name,
                                          self.row.status == PENDING)
        return list(session.scalars(query.order_by(self.row.id)))

    def claim(self, *, session: Session, request_id: int,
              worker_name: str) -> WorkerRequestColumns | None:
        """The row, now running on `worker_name`; None unless it was pending."""
        if not self._move(session, request_id, RUNNING, worker_name=worker_name,
                          started_at=utc_now()):
            return None
        return self.get(session=session, request_id=request_id)

    def finish(self, *, session: Session, request_id: int, result: dict[str, Any]) -> None:
        self._move(session, request_id, DONE, finished_at=utc_now(), **{self.result: result})

    def fail(self, *, session: Session, request_id: int, error: str) -> None:
        self._move(session, request_id, FAILED, finished_at=utc_now(), error=error[:ERROR_CHARS])

    def fail_interrupted(self, *, session: Session, worker_name: str, error: str) -> int:
        """Fail the requests a previous process of `worker_name` was running when it stopped
        (call as the worker starts): nothing would ever settle them. Their count."""
        result = session.execute(
            update(self.row)
            .where(self.row.worker_name == worker_name, self.row.status == RUNNING)
            .values(status=FAILED, finished_at=utc_now(), error=error[:ERROR_CHARS])
            .execution_options(synchronize_session=False))
        return result.rowcount

    def to_dict(self, row: WorkerRequestColumns) -> dict[str, Any]:
        """The columns every kind has, as the API answers them."""
        return {"id": row.id, "status": row.status, "request": row.request,
                "worker_name": row.worker_name, self.result: getattr(row, self.result),
                "error": row.error, "created_at": _when(row.created_at),
                "started_at": _when(row.started_at), "finished_at": _when(row.finished_at)}

    def _move(self, session: Session, request_id: int, target: str, **values: Any) -> bool:
        moved = session.execute(
            update(self.row)
            .where(self.row.id == request_id, self.row.status.in_(sources_of(target)))
            .values(status=target, **values)
            .execution_options(synchronize_session=False))
        return bool(moved.rowcount)


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
