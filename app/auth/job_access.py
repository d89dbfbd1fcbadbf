"""Which jobs a principal may see and act on: one place for the REST API and the UI alike
(the actions in app/actions/ ask it before they act, and audit what they did).

Another user's job is reported as missing, not forbidden, so ids do not tell whose jobs
exist.
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from tunedeck.jobs import queries as job_queries
from tunedeck.db.models import Job


def visible_job(*, session: Session, principal: Principal, job_id: int) -> Job:
    """The job, if the principal may see it; JobNotFound otherwise."""
    job = job_queries.get_job(session=session, job_id=job_id)
    if not principal.may_see_job_of(job.owner):
        raise job_queries.JobNotFound(job_id)
    return job


def visible_jobs(*, session: Session, principal: Principal, limit: int,
                 status: str | None = None, owner: str | None = None,
                 model_contains: str | None = None, archived: bool = False) -> list[Job]:
    """The newest jobs the principal may see (only `owner`'s, those in `status` and those
    whose model contains `model_contains`, when given): everyone's for an admin, else their
    own."""
    if not principal.is_admin:
        if owner is not None and owner != principal.name:
            return []
        owner = principal.name
    return job_queries.list_jobs(session=session, limit=limit, owner=owner, status=status,
                               model_contains=model_contains, archived=archived)


def owner_for_new_job(principal: Principal) -> str | None:
    """Jobs submitted with open access belong to nobody (every later account sees them
    only as an admin)."""
    return None if principal.open_access else principal.name
