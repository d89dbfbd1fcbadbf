"""The job an action acts on: found only if the principal may see it, else NotFound."""
from __future__ import annotations

from sqlalchemy.orm import Session

from app.actions.errors import NotFound
from app.auth.job_access import visible_job
from app.auth.principal import Principal
from tunedeck.jobs import queries as job_queries
from tunedeck.db.models import Job
from tunedeck.jobs.queries import MAX_JOB_ID


def find_visible_job(*, session: Session, principal: Principal, job_id: int) -> Job:
    """The job if the principal may see it (their own, or any for an admin); NotFound for a
    missing job and for another user's alike."""
    if not 1 <= job_id <= MAX_JOB_ID:
        # No such row can exist; asking the driver would overflow.
        raise NotFound(str(job_queries.JobNotFound(job_id)))
    try:
        return visible_job(session=session, principal=principal, job_id=job_id)
    except job_queries.JobNotFound as error:
        raise NotFound(str(error)) from error
