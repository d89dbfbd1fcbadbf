"""Downloading a job's artifact (its merged weights, its adapter, its TensorBoard files) as a zip: only of a job
the principal may see, and audited."""
from __future__ import annotations

from pathlib import Path

from app.actions.errors import NotFound
from app.actions.job_lookup import find_visible_job
from app.auth.principal import Principal
from app.views.artifacts import ARTIFACT_KINDS, artifact_zip
from app.views.jobs import job_run_folder
from tunedeck.accounts import audit
from tunedeck.db.engine import Database


def download_artifact(principal: Principal, job_id: int, kind: str, *, database: Database,
                      client: str | None = None) -> Path:
    """The artifact's zip file; NotFound for an unknown kind, a job the principal may not
    see, or a job without that artifact."""
    if kind not in ARTIFACT_KINDS:
        raise NotFound(f"no artifact {kind!r}; expected one of {', '.join(ARTIFACT_KINDS)}")
    with database.transaction() as session:
        job = find_visible_job(session=session, principal=principal, job_id=job_id)
    run = job_run_folder(job)
    zip_path = artifact_zip(run, kind) if run is not None else None
    if zip_path is None:
        raise NotFound(f"job {job_id} has no {kind} artifact (status {job.status})")
    with database.transaction() as session:
        audit.record(session=session, actor=principal.name, action=audit.DOWNLOAD, job_id=job_id,
                     detail=kind, client=client)
    return zip_path
