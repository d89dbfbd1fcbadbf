"""`POST /api/datasets?filename=NAME.jsonl` (or .json, .jsonl.gz, .parquet, .csv) with the
file as the raw body: the route streams
the body into app/actions/upload.py's DatasetUpload and translates its answers into HTTP.
A declared Content-Length over the cap is a 413 before any byte is read."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from app.actions.upload import DatasetRefused, DatasetUpload, safe_upload_name, too_large_message
from app.api.errors import client_of, http_error
from app.auth.principal import principal_of

upload_router = APIRouter()


@upload_router.post("/api/datasets", status_code=201)
async def upload_dataset(request: Request,
                         filename: str = Query(..., max_length=200,
                                               description="the file's name, e.g. train.jsonl")
                         ) -> dict[str, Any]:
    """Store an uploaded dataset file after checking its size, format and records. The
    answer names where it was kept (under a safe version of its name), its columns and,
    where they are not the usual ones, the likely `columns` mapping."""
    settings = request.app.state.settings
    try:
        safe_upload_name(filename)
    except DatasetRefused as refused:
        raise http_error(refused, location=("query",)) from refused
    _refuse_declared_size(request, settings.max_upload_bytes)
    with DatasetUpload(principal_of(request), filename, settings=settings) as upload:
        async for chunk in request.stream():
            upload.write(chunk)
        kept = await run_in_threadpool(
            upload.keep, database=request.app.state.database,
            client=client_of(request))
    return kept.to_json()


def _refuse_declared_size(request: Request, max_bytes: int) -> None:
    declared = request.headers.get("content-length")
    if declared is None:
        return  # a chunked body: counted as it arrives
    if not declared.isdigit():
        raise HTTPException(status_code=400, detail="Content-Length is not a number")
    if int(declared) > max_bytes:
        raise HTTPException(status_code=413, detail=too_large_message(max_bytes))
