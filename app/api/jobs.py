"""The REST API, under /api (plus /healthz); docs/reference/http-api.md lists its routes.

Routes only translate: each calls its action (app/actions/), whose typed errors
app/api/errors.py maps to status codes. The read routes live in app/api/job_reads.py."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from app.actions import (checkpoints, compare_backends, job_removal, plan as planning,
                         retry as retrying, submit)
from app.actions.lora_preview import preview_lora_targets
from app.api.errors import client_of
from app.api.job_reads import read_router
from app.api.params import JobId
from app.auth.principal import principal_of
from app.views.jobs import job_to_dict
from tunedeck.db.outage import RETRY_AFTER_SECONDS, database_reachable, unreachable_body
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.plan_request import PlanRequest

router = APIRouter()
router.include_router(read_router)


@router.get("/healthz", responses={503: {"description": "the database is unreachable"}})
def healthz(request: Request) -> JSONResponse:
    """200 while the web can reach its database; 503 with Retry-After while it cannot (a
    load balancer takes it out of rotation; the body says why)."""
    if database_reachable(request.app.state.database):
        return JSONResponse({"status": "ok", "database": "ok"})
    return JSONResponse({"status": "unavailable", "database": "unreachable",
                         **unreachable_body()}, status_code=503,
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


@router.post("/api/jobs", status_code=201)
def create_job(spec: JobSpec, request: Request) -> dict[str, Any]:
    state = request.app.state
    job = submit.submit(principal_of(request), spec, database=state.database,
                        celery_app=state.celery_app, settings=state.settings,
                        client=client_of(request))
    return job_to_dict(job)


@router.post("/api/jobs/{job_id}/cancel", status_code=202)
def cancel(job_id: JobId, request: Request) -> dict[str, Any]:
    job = submit.cancel(principal_of(request), job_id, database=request.app.state.database,
                        client=client_of(request))
    return job_to_dict(job)


@router.delete("/api/jobs/{job_id}")
def delete_job(job_id: JobId, request: Request) -> dict[str, Any]:
    """Delete a finished job: its rows and its run folder (only inside the runs root, and
    only where this server sees it); 409 for a queued or running job (cancel it first)."""
    state = request.app.state
    deleted = job_removal.delete_job(principal_of(request), job_id, database=state.database,
                                     settings=state.settings, client=client_of(request))
    return {"id": deleted.job_id, "deleted": True, "run_dir": deleted.run_dir,
            "run_dir_removed": deleted.folder_removed, "note": deleted.folder_note}


@router.post("/api/jobs/{job_id}/archive")
def archive(job_id: JobId, request: Request) -> dict[str, Any]:
    """Hide the job from listings (`GET /api/jobs?archived=true` lists it)."""
    job = job_removal.set_archived(principal_of(request), job_id, True,
                                   database=request.app.state.database, client=client_of(request))
    return job_to_dict(job)


@router.post("/api/jobs/{job_id}/unarchive")
def unarchive(job_id: JobId, request: Request) -> dict[str, Any]:
    job = job_removal.set_archived(principal_of(request), job_id, False,
                                   database=request.app.state.database, client=client_of(request))
    return job_to_dict(job)


@router.post("/api/jobs/{job_id}/resume", status_code=202)
def resume(job_id: JobId, request: Request) -> dict[str, Any]:
    state = request.app.state
    job = checkpoints.resume(principal_of(request), job_id, database=state.database,
                             celery_app=state.celery_app, client=client_of(request))
    return job_to_dict(job)


@router.post("/api/jobs/{job_id}/retry", status_code=201)
def retry(job_id: JobId, request: Request) -> dict[str, Any]:
    """A new job with the failed job's spec and the change that would help."""
    state = request.app.state
    job, change = retrying.retry(principal_of(request), job_id, database=state.database,
                                 celery_app=state.celery_app, client=client_of(request))
    return {**job_to_dict(job), "retry_of": job_id, "change": change.label}


class CompareBackendsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_steps: int | None = Field(None, ge=1, le=10_000_000)


@router.post("/api/jobs/{job_id}/compare-backends", status_code=201)
def compare_job_backends(job_id: JobId, request: Request,
                         body: CompareBackendsRequest | None = Body(None)) -> dict[str, Any]:
    """The job's spec as a ZeRO-2 and an FSDP job with a short step budget, both queued."""
    state = request.app.state
    jobs = compare_backends.compare_backends(
        principal_of(request), job_id, database=state.database, celery_app=state.celery_app,
        max_steps=body.max_steps if body else None, client=client_of(request))
    return {"jobs": [job_to_dict(job) for job in jobs],
            "compare_url": compare_backends.compare_url(jobs)}


@router.post("/api/plan")
def plan(request_body: PlanRequest, request: Request) -> dict[str, Any]:
    """Bytes per GPU of the spec under ddp, zero2, zero2_offload, fsdp and fsdp_offload, a
    verdict for each, the recommended backend and why."""
    return planning.plan(principal_of(request), request_body,
                         settings=request.app.state.settings, database=request.app.state.database)


@router.post("/api/lora-targets")
def lora_targets(spec: JobSpec, request: Request) -> dict[str, Any]:
    """What the spec's LoRA adapts on its model, as the trainer resolves it (`all-linear`
    included): `linear_modules`, `expert_parameters`, `routers` and `router` (frozen or
    trained), `experts_left_out`, `trainable_parameters`, `total_parameters`; 422 naming the
    model when the trainer cannot adapt it, 503 when this host cannot build models."""
    return preview_lora_targets(principal_of(request), spec,
                                settings=request.app.state.settings)
