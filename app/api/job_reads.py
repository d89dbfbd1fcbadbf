"""The REST API's read routes: jobs, their metrics, events, logs, checkpoints, config and
artifacts, the workers, and comparisons. Another user's job is a 404, as a missing one."""
from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse

from app.actions import artifacts
from app.actions.checkpoints import list_checkpoints
from app.actions.job_lookup import find_visible_job
from app.api.errors import client_of
from app.api.params import JobId, name_filter
from app.auth.job_access import visible_jobs
from app.auth.principal import principal_of
from app.views.cluster import cluster_overview
from app.views.job_compare import BadJobIds, compare_jobs, parse_job_ids
from app.views.jobs import (job_artifacts, job_config, job_lineage, job_log_file, job_to_dict,
                             latest_step_figures, read_job_log_chunk, read_job_log_tail_and_size)
from tunedeck.jobs import queries as job_queries
from tunedeck.db.engine import Database
from tunedeck.db.models import Job
from tunedeck.jobs.states import STATUSES
from tunedeck.metrics import store as metric_store
from tunedeck.metrics.downsample import DEFAULT_MAX_POINTS
from tunedeck.metrics.series import read_job_series

read_router = APIRouter()

# A job id in a path: out of the database's key range it is a 422 naming job_id, never a
# driver overflow (500).


def _database(request: Request) -> Database:
    return request.app.state.database


def _load_job(request: Request, job_id: int) -> Job:
    """The job if the requester may see it (their own, or any for an admin); 404 otherwise."""
    with _database(request).transaction() as session:
        return find_visible_job(session=session, principal=principal_of(request),
                                job_id=job_id)


@read_router.get("/api/workers")
def list_workers(request: Request) -> dict[str, Any]:
    """Every worker from its heartbeats (state, host, queues, GPUs with free memory and the
    job holding each), and the queued jobs with what each waits for."""
    return cluster_overview(database=_database(request),
                            worker_lost_seconds=request.app.state.settings.worker_lost_seconds)


JobStatus = Literal[STATUSES]  # type: ignore[valid-type]


@read_router.get("/api/jobs")
def list_jobs(request: Request, limit: int = Query(200, ge=1, le=1000),
              status: JobStatus | None = Query(None, description="only jobs in this status"),
              owner: str | None = name_filter("only this user's jobs (an admin's filter)"),
              archived: bool = Query(False, description="the archived jobs instead (they are "
                                                        "left out by default)")
              ) -> list[dict[str, Any]]:
    """Your jobs, newest first (an admin's: everyone's); archived ones only with
    `archived=true`. Each row's `latest` is its newest training step (`step`, `loss`,
    `tokens_per_second`), null before step 1."""
    with _database(request).transaction() as session:
        jobs = visible_jobs(session=session, limit=limit, principal=principal_of(request),
                            status=status, owner=owner, archived=archived)
        # One query for the newest step row of every listed job (as the jobs table's).
        summaries = metric_store.newest_step_rows(session=session,
                                                  job_ids=[job.id for job in jobs])
        return [{**job_to_dict(job), "latest": latest_step_figures(summaries.get(job.id))}
                for job in jobs]


@read_router.get("/api/jobs/{job_id}")
def get_job(job_id: JobId, request: Request) -> dict[str, Any]:
    """The job's row, plus `artifacts`: the dtype, bytes and file count of each download
    (only here, not in listings: it reads the run folder's files), and `lineage`: the jobs
    whose weights it started from (`model: job:ID`), oldest first, then itself, each
    `{id, name, objective, method, status}`."""
    job = _load_job(request, job_id)
    return {**job_to_dict(job), "artifacts": job_artifacts(job),
            "lineage": job_lineage(job, database=_database(request),
                                   principal=principal_of(request))}


@read_router.get("/api/jobs/{job_id}/rollouts")
def get_job_rollouts(job_id: JobId, request: Request,
                     limit: int = Query(20, ge=1, le=1000)) -> dict[str, Any]:
    """A GRPO job's kept rollouts, newest step first: every `grpo.rollouts_every` steps, a few
    of rank 0's prompts, each with all its completions, each completion's reward (the
    weighted sum) and each reward's own score. Empty for another objective."""
    _load_job(request, job_id)
    with _database(request).transaction() as session:
        return {"rollouts": metric_store.read_rollouts(session=session, job_id=job_id,
                                                       limit=limit)}


@read_router.get("/api/jobs/{job_id}/metrics", response_class=JSONResponse)
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


@read_router.get("/api/jobs/{job_id}/events")
def get_job_events(job_id: JobId, request: Request) -> list[dict[str, Any]]:
    _load_job(request, job_id)
    with _database(request).transaction() as session:
        events = job_queries.list_job_events(session=session, job_id=job_id)
        return [{"time": event.time.isoformat(), "kind": event.kind, "message": event.message}
                for event in events]


@read_router.get("/api/jobs/{job_id}/logs")
def get_job_logs(job_id: JobId, request: Request,
                 lines: int = Query(100, ge=1, le=5000),
                 offset: int | None = Query(None, ge=0, description=(
                     "instead of the last `lines`: the log's bytes after this offset"))
                 ) -> dict[str, Any]:
    """The last `lines` of the torchrun log (`lines`), and `next_offset`, its size when
    read. With `offset`, what follows it instead, for a caller that follows the log:
    `text` (up to 1 MiB, whole lines while the job runs), `offset` (where `text` starts:
    0 when the log is shorter than asked, rewritten by a relaunch), `next_offset` (ask from
    there next) and `complete` (the job has finished and every byte was sent). No log yet
    is empty, not an error."""
    job = _load_job(request, job_id)
    if offset is not None:
        return read_job_log_chunk(job, offset)
    tail, size = read_job_log_tail_and_size(job, lines)
    return {"lines": tail, "next_offset": size}


@read_router.get("/api/jobs/{job_id}/logs/full", response_class=StreamingResponse,
                 responses={200: {"content": {"text/plain": {}}}})
def download_job_log(job_id: JobId, request: Request) -> StreamingResponse:
    """The whole torchrun log (every rank's lines) as a text file, as long as it was when
    asked; 404 before it exists."""
    log_file = job_log_file(_load_job(request, job_id))
    if log_file is None:
        raise HTTPException(404, f"job {job_id} has no log yet")
    # A running job's log grows while it is sent: a FileResponse declares the size it saw
    # and then sends what the file holds by then, more than declared, and the server drops
    # the connection. Send exactly the bytes there were.
    size = log_file.stat().st_size
    return StreamingResponse(_first_bytes(log_file, size), media_type="text/plain; charset=utf-8",
                             headers={"Content-Length": str(size), "Content-Disposition":
                                      f'attachment; filename="job-{job_id}-torchrun.log"'})


def _first_bytes(path, size: int, chunk_size: int = 1 << 16):
    with open(path, "rb") as file:
        left = size
        while left > 0:
            chunk = file.read(min(chunk_size, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk


@read_router.get("/api/jobs/{job_id}/checkpoints")
def get_job_checkpoints(job_id: JobId, request: Request) -> list[dict[str, Any]]:
    return list_checkpoints(_load_job(request, job_id))


@read_router.get("/api/compare", response_class=JSONResponse)
def compare(request: Request, ids: str = Query(..., description="job ids, e.g. 1,2,3"),
            max_points: int = Query(DEFAULT_MAX_POINTS, ge=10, le=100_000)) -> Response:
    """Two or more jobs overlaid: their rows, the spec fields that differ, and the loss,
    throughput and memory series (and a preference job's `rewards_chosen`, `reward_margin`,
    ... by step; empty for SFT jobs), each row naming its `job_id`."""
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
    except job_queries.JobNotFound as error:
        raise HTTPException(status_code=404, detail=str(error)) from error
    return _series_response(comparison)


@read_router.get("/api/jobs/{job_id}/config")
def get_job_config(job_id: JobId, request: Request) -> dict[str, Any]:
    return job_config(_load_job(request, job_id))


@read_router.get("/api/jobs/{job_id}/artifacts/{kind}")
def download_artifact(job_id: JobId, kind: str, request: Request) -> FileResponse:
    zip_path = artifacts.download_artifact(
        principal_of(request), job_id, kind, database=_database(request),
        client=client_of(request))
    return FileResponse(zip_path, media_type="application/zip",
                        filename=f"job-{job_id}-{kind}.zip")
