"""What every router shares: the one translation of app/actions/errors.py into HTTP (the
app's handler for an action's error, so a route just calls its action), and the client
address a route audits."""
from __future__ import annotations

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse

from app.actions.errors import (ActionError, Conflict, Forbidden, Invalid, Location, NotFound,
                                Refused, TooLarge, Unavailable)

# The first entry an error is an instance of gives its status.
STATUS_CODES: dict[type[ActionError], int] = {
    NotFound: 404, Forbidden: 403, Conflict: 409, Refused: 409, Invalid: 422, TooLarge: 413,
    Unavailable: 503,
}


def http_error(error: ActionError, *, location: Location = ("body",)) -> HTTPException:
    """The HTTPException a route raises for an action's error: an Invalid becomes FastAPI's
    422 shape, its problems' locations under `location` (where the action's input sits in
    the request); every other error's detail is its message."""
    if isinstance(error, Invalid):
        return HTTPException(status_code=422, detail=validation_detail(error, location))
    status = next((code for kind, code in STATUS_CODES.items() if isinstance(error, kind)), 500)
    return HTTPException(status_code=status, detail=str(error))


def validation_detail(error: Invalid, location: Location = ("body",)) -> list[dict]:
    return [{"loc": [*location, *problem_location], "msg": message, "type": "value_error"}
            for problem_location, message in error.problems]


def client_of(request: Request) -> str | None:
    """The client's address, as the audit log records it (None when the server has none)."""
    return request.client.host if request.client else None


def action_error_response(_request: Request, error: ActionError) -> JSONResponse:
    """What the app answers for an action's error a route let through: the body FastAPI
    gives an HTTPException (`{"detail": ...}`), an Invalid's locations under "body"."""
    http = http_error(error)
    return JSONResponse(status_code=http.status_code, content={"detail": http.detail})
