"""A job that starts from another job's weights: `model: job:ID` names the merged weights a
succeeded job produced (for lora and qlora, the base with the adapter merged), so SFT, then
DPO, then GRPO chain without a path in sight.

The database keeps `job:ID` in the spec (that is the lineage: each job names its parent);
the worker hands the trainer the parent's merged folder instead (`weights_folder`), which is
the only place a path appears. The web refuses at submit a job id the principal may not
read, or one that did not succeed, as a problem of the `model` field. Read-only: the caller
owns the session.
"""
from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.orm import Session

from tunedeck.db.models import Job
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs.states import SUCCEEDED
from tunedeck.run_folder import RunFolder

JOB_REFERENCE = re.compile(r"^job:([1-9][0-9]{0,9})$")
# Parents followed at most: each parent is older than its child, so a chain ends, but a
# corrupted row must not make a lookup walk forever.
MAX_LINEAGE = 64


def parent_job_id(model: str) -> int | None:
    """The job id of a `job:ID` model reference, else None."""
    match = JOB_REFERENCE.match(model)
    return int(match.group(1)) if match else None


def find_job(session: Session, job_id: int) -> Job | None:
    """The row, or None (an id past the column's range is no row: the driver would raise)."""
    if not 1 <= job_id <= job_queries.MAX_JOB_ID:
        return None
    try:
        return job_queries.get_job(session=session, job_id=job_id)
    except job_queries.JobNotFound:
        return None


def parent_problem(parent: Job | None, reference: str) -> str | None:
    """Why the job a `job:ID` names cannot be started from (missing, or not succeeded);
    None when it can. A job the principal may not read is passed as None: missing and
    hidden read alike."""
    if parent is None:
        return f"model {reference}: no such job that you may read"
    if parent.status != SUCCEEDED:
        return (f"model {reference}: job {parent.id} is {parent.status}; only a succeeded job's "
                "weights can be started from")
    return None


def weights_folder(parent: Job, *, runs_dir_for) -> Path:
    """Where the parent's merged weights are: its run folder's merged/ (`runs_dir_for(id)`
    gives a run folder for a row that does not record its own)."""
    run_dir = Path(parent.run_dir) if parent.run_dir else Path(runs_dir_for(parent.id))
    return RunFolder(run_dir).merged_dir


def base_model(session: Session, model: str) -> str:
    """The model a `job:ID` chain starts from (a hub id, a folder, a built-in): what the
    weights' shape and family are, for the memory plan and the LoRA targets. A reference
    that is not a job's comes back as it is; a broken chain ends at its last job's."""
    for _ in range(MAX_LINEAGE):
        job_id = parent_job_id(model)
        if job_id is None:
            return model
        parent = find_job(session, job_id)
        if parent is None:
            return model
        model = parent.spec_model.model
    return model


def lineage(session: Session, job: Job) -> list[Job]:
    """The job's ancestors, oldest first, then the job: [SFT, DPO, GRPO]."""
    chain = [job]
    for _ in range(MAX_LINEAGE):
        job_id = parent_job_id(chain[0].spec_model.model)
        if job_id is None:
            break
        parent = find_job(session, job_id)
        if parent is None:
            break
        chain.insert(0, parent)
    return chain


def parent_weights(session: Session, model: str, *, runs_dir_for) -> tuple[Path | None, str | None]:
    """(the merged folder a `job:ID` model names, None) or (None, why it cannot be used),
    as a worker resolves it before launch (the web checked access at submit); (None, None)
    for a model that names no job."""
    job_id = parent_job_id(model)
    if job_id is None:
        return None, None
    parent = find_job(session, job_id)
    problem = parent_problem(parent, model)
    if problem:
        return None, problem
    return weights_folder(parent, runs_dir_for=runs_dir_for), None
