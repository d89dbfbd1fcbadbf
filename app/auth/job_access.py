"""Which jobs a principal may see and act on, and the audit record of what they did: one
place for the REST API and the UI alike.

Another user's job is reported as missing, not forbidden, so ids do not tell whose jobs
exist.
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from tunedeck import job_store
from tunedeck.accounts import audit
from tunedeck.db.engine import Database
from tunedeck.db.models import Job


def visible_job(*, session: Session, principal: Principal, job_id: int) -> Job:
    """The job, if the principal may see it; JobNotFound otherwise."""
    job = job_store.get_job(session=session, job_id=job_id)
    if not principal.may_see_job_of(job.owner):
        raise job_store.JobNotFound(job_id)
    return job


def ensure_visible(*, database: Database, principal: Principal, job_id: int) -> None:
    """JobNotFound unless the principal may see the job: the check before any action."""
    with database.transaction() as session:
        visible_job(session=session, principal=principal, job_id=job_id)


def visible_jobs(*, session: Session, principal: Principal, limit: int) -> list[Job]:
    owner = None if principal.is_admin else principal.name
    return job_store.list_jobs(session=session, limit=limit, owner=owner)


def owner_for_new_job(principal: Principal) -> str | None:
    """Jobs submitted with open access belong to nobody (every later account sees them
    only as an admin)."""
    return None if principal.open_access else principal.name


def record_action(*, database: Database, principal: Principal, action: str,
                  job_id: int | None = None, detail: str = "", client: str | None = None) -> None:
    with database.transaction() as session:
        audit.record(session=session, actor=principal.name, action=action, job_id=job_id,
                     detail=detail, client=client)
