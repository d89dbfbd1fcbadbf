"""The REST API, under /api (plus /healthz); docs/cli-and-api.md lists its routes."""
from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, HTTPException, Path, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from app.views.artifacts import ARTIFACT_KINDS, artifact_zip
from app.views.cluster import cluster_overview
from app.actions.compare_backends import ComparisonRefused, compare_backends, compare_url
from app.actions.checkpoints import NothingToResume, list_checkpoints, resume_from_latest_checkpoint
from app.views.job_compare import BadJobIds, compare_jobs, parse_job_ids
from app.actions.retry import RetryRefused, retry_job
from app.actions.lora_preview import PreviewUnavailable, lora_targets_preview
from app.actions.submit import cancel_job, submit_job
from app.auth.job_access import owner_for_new_job, record_action, visible_job, visible_jobs
from app.auth.principal import principal_of
from app.auth.spec_access import as_validation_detail, spec_access_problems
from app.views.jobs import (MAX_JOB_ID, job_artifacts, job_config, job_run_folder, job_to_dict,
                           read_job_log_tail)
from tunedeck import job_store
from tunedeck.accounts import audit
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.metrics.downsample import DEFAULT_MAX_POINTS
from tunedeck.job_spec import JobSpec
from tunedeck.metrics.series import read_job_series
from tunedeck.planner.plan_request import PlanRequest, plan_json

router = APIRouter()

# A job id in a path: out of the database's key range it is a 422 naming job_id, never a
# driver overflow (500).
JobId = Annotated[int, Path(ge=1, le=MAX_JOB_ID)]


def _database(request: Request) -> Database:
    return request.app.state.database


def _load_job(request: Request, job_id: int) -> Job:
    """The job if the requester may see it (their own, or any for an admin); 404 otherwise."""
    if not 1 <= job_id <= MAX_JOB_ID:
        # No such row can exist; asking the driver would overflow (routes taking a plain
        # int job_id rely on this).
        raise HTTPException(status_code=404, detail=str(job_store.JobNotFound(job_id)))
    with _database(request).transaction() as session:
        try:
            return visible_job(session=session, principal=principal_of(request), job_id=job_id)
        except job_store.JobNotFound as error:
            raise HTTPException(status_code=404, detail=str(error)) from error


def _audit(request: Request, action: str, job_id: int | None = None, detail: str = "") -> None:
    record_action(database=_database(request), principal=principal_of(request), action=action,
                  job_id=job_id, detail=detail,
                  client=request.client.host if request.client else None)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/api/jobs", status_code=201)
def create_job(spec: JobSpec, request: Request) -> dict[str, Any]:
    problems = spec_access_problems(spec, principal=principal_of(request),
                                    settings=request.app.state.settings)
    if problems:
        raise HTTPException(status_code=422, detail=as_validation_detail(problems))
    job = submit_job(database=_database(request), celery_app=request.app.state.celery_app,
                     spec=spec, owner=owner_for_new_job(principal_of(request)))
    _audit(request, audit.SUBMIT, job.id, detail=job.name)
    return job_to_dict(job)


@router.get("/api/workers")
def list_workers(request: Request) -> dict[str, Any]:
    """Every worker from its heartbeats (state, host, queues, GPUs with free memory and the
    job holding each), and the queued jobs with what each waits for."""
    return cluster_overview(database=_database(request),
                            worker_lost_seconds=request.app.state.settings.worker_lost_seconds)


@router.get("/api/jobs")
def list_jobs(request: Request, limit: int = Query(200, ge=1, le=1000)) -> list[dict[str, Any]]:
    """Your jobs, newest first (an admin's: everyone's)."""
    with _database(request).transaction() as session:
        return [job_to_dict(job) for job in visible_jobs(session=session, limit=limit,
                                                         principal=principal_of(request))]


@router.get("/api/jobs/{job_id}")
def get_job(job_id: JobId, request: Request) -> dict[str, Any]:
    """The job's row, plus `artifacts`: the dtype, bytes and file count of each download
    (only here, not in listings: it reads the run folder's files)."""
    job = _load_job(request, job_id)
    return {**job_to_dict(job), "artifacts": job_artifacts(job)}


@router.get("/api/jobs/{job_id}/metrics", response_class=JSONResponse)
def get_job_metrics(job_id: int, request: Request,
                    max_points: int = Query(DEFAULT_MAX_POINTS, ge=10, le=100_000)
                    ) -> JSONResponse:
    """Every series, each line downsampled on the server to at most `max_points` (min and
    max per bucket, so spikes survive; the first and last points always do)."""
    _load_job(request, job_id)
    with _database(request).transaction() as session:
        series = read_job_series(session=session, job_id=job_id, max_points=max_points)
    return _series_response(series)


def _series_response(series: dict[str, Any]) -> Response:
    """Chart series as JSON. They are plain JSON values already (the stores turn NaN and
    infinity into None), so FastAPI's jsonable_encoder walk is skipped, and orjson encodes
    them: json.dumps took 22 ms of a 1,000-step job's 40 ms request, orjson 2 ms, and
    live pages poll every second (bench/freshness.py)."""
    return Response(orjson.dumps(series, option=orjson.OPT_SERIALIZE_NUMPY),
                    media_type="application/json")


@router.get("/api/jobs/{job_id}/events")
def get_job_events(job_id: JobId, request: Request) -> list[dict[str, Any]]:
    _load_job(request, job_id)
    with _database(request).transaction() as session:
        events = job_store.list_job_events(session=session, job_id=job_id)
        return [{"time": event.time.isoformat(), "kind": event.kind, "message": event.message}
                for event in events]


@router.get("/api/jobs/{job_id}/logs")
def get_job_logs(job_id: JobId, request: Request,
                 lines: int = Query(100, ge=1, le=5000)) -> dict[str, list[str]]:
    return {"lines": read_job_log_tail(_load_job(request, job_id), lines)}


@router.post("/api/jobs/{job_id}/cancel", status_code=202)
def cancel(job_id: JobId, request: Request) -> dict[str, Any]:
    _load_job(request, job_id)
    job = cancel_job(database=_database(request), job_id=job_id)
    _audit(request, audit.CANCEL, job_id)
    return job_to_dict(job)


@router.get("/api/jobs/{job_id}/checkpoints")
def get_job_checkpoints(job_id: JobId, request: Request) -> list[dict[str, Any]]:
    return list_checkpoints(_load_job(request, job_id))


@router.post("/api/jobs/{job_id}/resume", status_code=202)
def resume(job_id: JobId, request: Request) -> dict[str, Any]:
    _load_job(request, job_id)
    try:
        job = resume_from_latest_checkpoint(database=_database(request),
                                            celery_app=request.app.state.celery_app, job_id=job_id)
    except (NothingToResume, job_store.InvalidTransition) as error:
        raise HTTPException(status_code=409, detail=str(error)) from error
    _audit(request, audit.RESUME, job_id)
    return job_to_dict(job)


@router.post("/api/jobs/{job_id}/retry", status_code=201)
def retry(job_id: JobId, request: Request) -> dict[str, Any]:
    """A new job with the failed job's spec and the change that would help."""
    _load_job(request, job_id)
    try:
        job, change = retry_job(database=_database(request),
                                celery_app=request.app.state.celery_app, job_id=job_id)
    except RetryRefused as error:
        raise HTTPException(status_code=409, detail=str(error)) from error
    _audit(request, audit.RETRY, job_id, detail=f"as job {job.id} ({change.label})")
    return {**job_to_dict(job), "retry_of": job_id, "change": change.label}


class CompareBackendsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_steps: int | None = Field(None, ge=1, le=10_000_000)


@router.post("/api/jobs/{job_id}/compare-backends", status_code=201)
def compare_job_backends(job_id: JobId, request: Request,
                         body: CompareBackendsRequest | None = Body(None)) -> dict[str, Any]:
    """The job's spec as a ZeRO-2 and an FSDP job with a short step budget, both queued."""
    _load_job(request, job_id)
    try:
        jobs = compare_backends(database=_database(request),
                                celery_app=request.app.state.celery_app, job_id=job_id,
                                max_steps=body.max_steps if body else None)
    except ComparisonRefused as error:
        raise HTTPException(status_code=409, detail=str(error)) from error
    _audit(request, audit.COMPARE_BACKENDS, job_id,
           detail="as jobs " + ", ".join(str(job.id) for job in jobs))
    return {"jobs": [job_to_dict(job) for job in jobs], "compare_url": compare_url(jobs)}


@router.get("/api/compare", response_class=JSONResponse)
def compare(request: Request, ids: str = Query(..., description="job ids, e.g. 1,2,3"),
            max_points: int = Query(DEFAULT_MAX_POINTS, ge=10, le=100_000)) -> Response:
    """Two or more jobs overlaid: their rows, the spec fields that differ, and the loss,
    throughput and memory series, each row naming its `job_id`."""
    try:
        job_ids = parse_job_ids(ids)
    except BadJobIds as error:
        raise HTTPException(status_code=422, detail=[{
            "loc": ["query", "ids"], "msg": str(error), "type": "value_error"}]) from error
    for job_id in job_ids:
        _load_job(request, job_id)  # 404 for a job the requester may not see
    try:
        comparison = compare_jobs(database=_database(request), job_ids=job_ids,
                                  max_points=max_points)
    except job_store.JobNotFound as error:
        raise HTTPException(status_code=404, detail=str(error)) from error
    return _series_response(comparison)


@router.get("/api/jobs/{job_id}/config")
def get_job_config(job_id: JobId, request: Request) -> dict[str, Any]:
    return job_config(_load_job(request, job_id))


@router.get("/api/jobs/{job_id}/artifacts/{kind}")
def download_artifact(job_id: JobId, kind: str, request: Request) -> FileResponse:
    if kind not in ARTIFACT_KINDS:
        raise HTTPException(status_code=404, detail=f"no artifact {kind!r}; expected merged or adapter")
    job = _load_job(request, job_id)
    run = job_run_folder(job)
    zip_path = artifact_zip(run, kind) if run is not None else None
    if zip_path is None:
        raise HTTPException(status_code=404,
                            detail=f"job {job_id} has no {kind} artifact (status {job.status})")
    _audit(request, audit.DOWNLOAD, job_id, detail=kind)
    return FileResponse(zip_path, media_type="application/zip",
                        filename=f"job-{job_id}-{kind}.zip")


@router.post("/api/plan")
def plan(request_body: PlanRequest, request: Request) -> dict[str, Any]:
    """Bytes per GPU of the spec under ddp, zero2, zero2_offload, fsdp and fsdp_offload, a
    verdict for each, the recommended backend and why."""
    _refuse_unreadable_model(request_body.spec, request, location=["body", "spec"])
    try:
        return plan_json(request_body.spec, request_body.gpus)
    except ValueError as error:
        raise HTTPException(status_code=422, detail=[{
            "loc": ["body", "spec", "model"], "msg": str(error), "type": "value_error"}]) from error


@router.post("/api/lora-targets")
def lora_targets(spec: JobSpec, request: Request) -> dict[str, Any]:
    """What the spec's LoRA adapts on its model, as the trainer resolves it (`all-linear`
    included): `linear_modules`, `expert_parameters`, `routers` and `router` (frozen or
    trained), `experts_left_out`, `trainable_parameters`, `total_parameters`; 422 naming the
    model when the trainer cannot adapt it, 503 when this host cannot build models."""
    _refuse_unreadable_model(spec, request, location=["body"])
    try:
        return lora_targets_preview(spec, home=request.app.state.settings.home_dir)
    except PreviewUnavailable as error:
        raise HTTPException(status_code=503, detail=str(error)) from error
    except ValueError as error:
        raise HTTPException(status_code=422, detail=[{
            "loc": ["body", "model"], "msg": str(error), "type": "value_error"}]) from error


def _refuse_unreadable_model(spec: JobSpec, request: Request, *, location: list[str]) -> None:
    """A 422 for a local model outside the requester's roots: the planner and the target
    resolver read its config.json, and must not probe folders a job could not use."""
    problems = [(field, message) for field, message in spec_access_problems(
        spec, principal=principal_of(request), settings=request.app.state.settings)
        if field == "model"]
    if problems:
        raise HTTPException(status_code=422, detail=[{
            "loc": [*location, field], "msg": message, "type": "value_error"}
            for field, message in problems])
