"""How a route answers a request a worker answers (app/actions/worker_requests.py): 200 once
it finished (done, or failed with the error), else 202 with where to poll it."""
from __future__ import annotations

from fastapi.responses import JSONResponse

from app.actions.worker_requests import RequestAnswer


def request_response(answer: RequestAnswer, *, poll_path: str) -> JSONResponse:
    """`poll_path` is the GET route of this kind, with `{id}` for the request's id."""
    if answer.finished:
        return JSONResponse(answer.to_json())
    return JSONResponse(answer.to_json(), status_code=202,
                        headers={"Location": poll_path.format(id=answer.id)})
