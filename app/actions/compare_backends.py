""""Compare backends": one job's spec run twice with a short step budget, once under
DeepSpeed ZeRO-2 and once under FSDP, everything else equal, so which backend suits this
model and these cards is answered by measurement. Both go through the normal submit path."""
from __future__ import annotations

from app.actions.errors import Conflict
from app.actions.job_lookup import find_visible_job
from app.actions.submit import submit_job
from app.auth.principal import Principal
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.spec.fields import BACKEND_NAMES
from tunedeck.spec.job_spec import JobSpec

DEFAULT_COMPARE_STEPS = 50  # enough steps for throughput and memory to settle, cheap to run


class ComparisonRefused(Conflict):
    """The job's spec cannot run under both backends."""


def compare_steps(spec: JobSpec, max_steps: int | None) -> int:
    """The step budget asked for, else the job's own (capped at 50), else 50."""
    if max_steps is not None:
        return max_steps
    return min(spec.max_steps or DEFAULT_COMPARE_STEPS, DEFAULT_COMPARE_STEPS)


def backend_variants(spec: JobSpec, max_steps: int | None = None) -> list[JobSpec]:
    """A ZeRO-2 and an FSDP copy of the spec, named after it (when it has a name), with the short step budget and
    no checkpoints (a comparison is thrown away after reading it)."""
    if spec.method == "qlora":
        raise ComparisonRefused(
            "qlora cannot run under FSDP (FSDP drops the 4-bit weights' quantization state), "
            "so there is nothing to compare: use backend zero2 for qlora, or compare a lora "
            "copy of the job")
    steps = compare_steps(spec, max_steps)
    base = spec.model_dump()
    return [JobSpec.model_validate({**base, "backend": backend, "max_steps": steps,
                                    "epochs": None, "checkpoint_every_steps": 0,
                                    # Unnamed: each copy gets its own default name,
                                    # which already says its backend.
                                    "name": f"{spec.name} ({backend})" if spec.name else None})
            for backend in BACKEND_NAMES]


def compare_backends(principal: Principal, job_id: int, *, database: Database, celery_app,
                     max_steps: int | None = None, client: str | None = None) -> list[Job]:
    """Submit both variants; the source job's events say which jobs compare it. NotFound
    for a job the principal may not see; ComparisonRefused (a Conflict) for a qlora job."""
    with database.transaction() as session:
        source = find_visible_job(session=session, principal=principal, job_id=job_id)
        variants = backend_variants(source.spec_model, max_steps)
    # The variants are the source job's owner's, whoever asked for them.
    jobs = [submit_job(database=database, celery_app=celery_app, spec=spec, owner=source.owner)
            for spec in variants]
    with database.transaction() as session:
        job_store.add_job_event(session=session, job_id=job_id, kind="compare",
                                message=f"compared backends: jobs {jobs[0].id} and {jobs[1].id}")
        audit.record(session=session, actor=principal.name, action=audit.COMPARE_BACKENDS,
                     job_id=job_id, detail="as jobs " + ", ".join(str(job.id) for job in jobs),
                     client=client)
    return jobs


def compare_url(jobs: list[Job]) -> str:
    return "/api/compare?ids=" + ",".join(str(job.id) for job in jobs)
