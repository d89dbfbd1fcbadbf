"""Submitting and cancelling a job, one policy for the API and the UI: the spec's paths
and trust_remote_code checked against the principal, the row stored and audited in one
transaction, then its id enqueued (after the commit)."""
from __future__ import annotations

import logging

from app.actions.errors import Invalid
from app.actions.job_lookup import find_visible_job
from app.auth.job_access import owner_for_new_job
from app.auth.principal import Principal
from app.actions.input_checks import input_problems, parent_job_problems
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit
from tunedeck.cluster import workers as worker_registry
from tunedeck.cluster.host_capability import host_problems
from tunedeck.cluster.placement import WorkerView
from tunedeck.services.broker import enqueue_job
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings

log = logging.getLogger(__name__)


def submit(principal: Principal, spec: JobSpec, *, database: Database, celery_app,
           settings: Settings, client: str | None = None) -> Job:
    """The new queued job; Invalid (by field) for paths or switches the principal may not
    use, inputs the job could not read (app/actions/input_checks.py) or choices no worker
    can run, and nothing is stored."""
    problems = input_problems(spec, principal=principal, settings=settings)
    problems += parent_job_problems(spec, principal=principal, database=database)
    problems += host_refusals(spec, database=database, settings=settings)
    if problems:
        raise Invalid.of_fields(problems)
    with database.transaction() as session:
        job = job_store.create_job(session=session, spec=spec, owner=owner_for_new_job(principal))
        audit.record(session=session, actor=principal.name, action=audit.SUBMIT, job_id=job.id,
                     detail=job.name, client=client)
    enqueue_stored_job(celery_app, job)
    return job


def host_refusals(spec: JobSpec, *, database: Database,
                  settings: Settings) -> list[tuple[str, str]]:
    """The spec's choices no live worker that could place it can run (the form shows
    them beside their fields before submit; submit refuses them by field)."""
    return host_problems(spec, live_workers(database=database, settings=settings))


def live_workers(*, database: Database, settings: Settings) -> list[WorkerView]:
    """The workers placement may count on now (online, heard from recently)."""
    with database.transaction() as session:
        return worker_registry.live_worker_views(
            session=session, silent_seconds=settings.worker_lost_seconds)


def submit_job(*, database: Database, celery_app, spec: JobSpec, owner: str | None = None) -> Job:
    """Store and enqueue a job the caller's action has already checked and audits."""
    with database.transaction() as session:
        job = job_store.create_job(session=session, spec=spec, owner=owner)
    enqueue_stored_job(celery_app, job)
    return job


def enqueue_stored_job(celery_app, job: Job) -> None:
    try:
        enqueue_job(celery_app, job.id, job.spec_model)
    except Exception:  # the row is the record; a worker's start-up sweep re-sends it
        log.exception("job %s stored but not enqueued; a worker will pick it up on start", job.id)


def cancel(principal: Principal, job_id: int, *, database: Database,
           client: str | None = None) -> Job:
    """A queued job ends at once, a running one is asked to stop; NotFound for a job the
    principal may not see."""
    with database.transaction() as session:
        find_visible_job(session=session, principal=principal, job_id=job_id)
        job = job_store.request_cancel(session=session, job_id=job_id)
        audit.record(session=session, actor=principal.name, action=audit.CANCEL, job_id=job_id,
                     client=client)
    return job
