"""The job_generations table: the only writers of a generation's status.

pending (the web stored the request) -> running (the worker claimed it, by a conditional
UPDATE, so a message delivered twice runs once) -> done (with its answer) or failed (with
the error). The caller owns the transaction.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tunedeck.db.models import JobGeneration, utc_now
from tunedeck.generation.request import DONE, FAILED, PENDING, RUNNING, GenerationRequest

ERROR_CHARS = 4000


class GenerationNotFound(Exception):
    def __init__(self, generation_id: int):
        super().__init__(f"generation {generation_id} does not exist")
        self.generation_id = generation_id


def create_generation(*, session: Session, job_id: int, request: GenerationRequest,
                      owner: str | None, worker_name: str | None) -> JobGeneration:
    generation = JobGeneration(job_id=job_id, status=PENDING, owner=owner,
                               request=request.model_dump(mode="json"), worker_name=worker_name)
    session.add(generation)
    session.flush()
    return generation


def get_generation(*, session: Session, generation_id: int) -> JobGeneration:
    generation = session.get(JobGeneration, generation_id, populate_existing=True)
    if generation is None:
        raise GenerationNotFound(generation_id)
    return generation


def pending_generation_ids(*, session: Session, worker_name: str) -> list[int]:
    """The generations waiting for `worker_name` (the worker of their job), oldest first."""
    query = select(JobGeneration.id).where(JobGeneration.worker_name == worker_name,
                                           JobGeneration.status == PENDING)
    return list(session.scalars(query.order_by(JobGeneration.id)))


def claim_generation(*, session: Session, generation_id: int,
                     worker_name: str) -> JobGeneration | None:
    """The row, now running on `worker_name`; None unless it was pending."""
    claimed = session.execute(
        update(JobGeneration)
        .where(JobGeneration.id == generation_id, JobGeneration.status == PENDING)
        .values(status=RUNNING, worker_name=worker_name, started_at=utc_now())
        .execution_options(synchronize_session=False))
    if not claimed.rowcount:
        return None
    return get_generation(session=session, generation_id=generation_id)


def finish_generation(*, session: Session, generation_id: int, answer: dict[str, Any]) -> None:
    _settle(session, generation_id, status=DONE, answer=answer)


def fail_generation(*, session: Session, generation_id: int, error: str) -> None:
    _settle(session, generation_id, status=FAILED, error=error[:ERROR_CHARS])


def fail_interrupted_generations(*, session: Session, worker_name: str) -> int:
    """Fail the generations a previous process of `worker_name` was running when it
    stopped (call as the worker starts): nothing would ever settle them. Their count."""
    result = session.execute(
        update(JobGeneration)
        .where(JobGeneration.worker_name == worker_name, JobGeneration.status == RUNNING)
        .values(status=FAILED, finished_at=utc_now(),
                error=f"worker {worker_name} stopped while generating; ask again")
        .execution_options(synchronize_session=False))
    return result.rowcount


def _settle(session: Session, generation_id: int, **values: Any) -> None:
    session.execute(
        update(JobGeneration)
        .where(JobGeneration.id == generation_id, JobGeneration.status == RUNNING)
        .values(finished_at=utc_now(), **values)
        .execution_options(synchronize_session=False))


def generation_to_dict(generation: JobGeneration) -> dict[str, Any]:
    """The row as the API answers it; a done one's answer fields (text, tokens, seconds,
    ...) at the top level, as `POST /api/jobs/{id}/generate` promises."""
    def when(moment):
        return moment.isoformat() if moment is not None else None

    return {**(generation.answer or {}),
            "id": generation.id, "job_id": generation.job_id, "status": generation.status,
            "variant": generation.request.get("variant"), "worker_name": generation.worker_name,
            "error": generation.error, "created_at": when(generation.created_at),
            "started_at": when(generation.started_at),
            "finished_at": when(generation.finished_at)}
