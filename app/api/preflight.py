"""`POST /api/datasets/preflight` and `GET /api/datasets/preflight/{id}`: the routes only
translate app/actions/preflight.py's answers into HTTP."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.actions.preflight import await_preflight, start_preflight
from app.api.errors import client_of
from app.api.params import RequestId
from app.api.worker_requests import request_response
from app.auth.principal import principal_of
from tunedeck.data.preflight_request import PreflightRequest

preflight_router = APIRouter()

POLL_PATH = "/api/datasets/preflight/{id}"
ANSWER = {"description": "the preflight row: `id`, `status` (pending, running, done, failed), "
                         "`request`, `report` (when done), `error` (when failed), `waiting`"}


@preflight_router.post("/api/datasets/preflight",
                       responses={200: ANSWER, 202: {"description": "not finished yet: poll "
                                                     "GET /api/datasets/preflight/{id}"}})
def preflight_dataset(body: PreflightRequest, request: Request) -> JSONResponse:
    """What training will make of the data, computed on a worker that can read it: record
    count, token-length histogram against seq_len, answers that truncation cuts or empties,
    duplicates, and an example with the trained tokens marked. 200 when it finished within
    about 30 s (done, or failed with the error), else 202."""
    state = request.app.state
    preflight_id = start_preflight(database=state.database, celery_app=state.celery_app,
                                   settings=state.settings, principal=principal_of(request),
                                   request=body, client=client_of(request))
    answer = await_preflight(database=state.database, settings=state.settings,
                             principal=principal_of(request), preflight_id=preflight_id)
    return request_response(answer, poll_path=POLL_PATH)


@preflight_router.get("/api/datasets/preflight/{preflight_id}", responses={200: ANSWER})
def get_preflight(preflight_id: RequestId, request: Request) -> JSONResponse:
    """A preflight as it stands now; 404 for one that is missing or another user's."""
    state = request.app.state
    answer = await_preflight(database=state.database, settings=state.settings,
                             principal=principal_of(request), preflight_id=preflight_id,
                             wait_seconds=0)
    return JSONResponse(answer.to_json())
