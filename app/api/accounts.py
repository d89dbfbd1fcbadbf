"""The account routes: who am I, my API tokens, and for admins the users and the audit
trail. They translate app/actions/accounts.py into HTTP."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from app.actions import accounts as account_actions
from app.api.errors import client_of
from app.api.params import name_filter
from app.auth.principal import principal_of
from tunedeck.accounts import audit, users as accounts
from tunedeck.db.models import Credential
from tunedeck.jobs.queries import MAX_JOB_ID

account_router = APIRouter()


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = Field("", max_length=200)
    expires_in_days: float | None = Field(None, gt=0, le=3650)


class UserRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., pattern=accounts.USER_NAME_PATTERN.pattern)
    password: str = Field(..., min_length=accounts.MIN_PASSWORD_LENGTH,
                          max_length=accounts.MAX_PASSWORD_LENGTH)
    admin: bool = False


@account_router.get("/api/me")
def me(request: Request) -> dict[str, Any]:
    principal = principal_of(request)
    return {"name": principal.name, "admin": principal.is_admin,
            "open_access": principal.open_access}


@account_router.get("/api/tokens")
def list_tokens(request: Request) -> list[dict[str, Any]]:
    """Your API tokens (never their secrets)."""
    tokens = account_actions.list_tokens(principal_of(request),
                                         database=request.app.state.database)
    return [_token_to_dict(token) for token in tokens]


@account_router.post("/api/tokens", status_code=201)
def create_token(body: TokenRequest, request: Request) -> dict[str, Any]:
    """A new API token for yourself; its secret is in this answer only."""
    secret = account_actions.create_token(
        principal_of(request), label=body.label, expires_in_days=body.expires_in_days,
        database=request.app.state.database, client=client_of(request))
    return {"token": secret, "label": body.label}


@account_router.delete("/api/tokens/{token_id}", status_code=204)
def revoke_token(token_id: Annotated[int, Path(ge=1, le=MAX_JOB_ID)], request: Request) -> None:
    account_actions.revoke_token(principal_of(request), token_id,
                                 database=request.app.state.database, client=client_of(request))


@account_router.get("/api/users")
def list_users(request: Request) -> list[dict[str, Any]]:
    users = account_actions.list_users(principal_of(request),
                                       database=request.app.state.database)
    return [{"name": user.name, "admin": user.role == accounts.ADMIN_ROLE,
             "disabled": user.disabled, "created_at": user.created_at.isoformat()}
            for user in users]


@account_router.post("/api/users", status_code=201)
def create_user(body: UserRequest, request: Request) -> dict[str, Any]:
    account_actions.create_user(principal_of(request), name=body.name,
                                password=body.password, is_admin=body.admin,
                                database=request.app.state.database, client=client_of(request))
    return {"name": body.name, "admin": body.admin}


@account_router.get("/api/audit")
def list_audit(request: Request, limit: int = Query(200, ge=1, le=10_000),
               job_id: int | None = Query(None, ge=1, le=MAX_JOB_ID),
               actor: str | None = name_filter("only what this name did")) -> list[dict[str, Any]]:
    """The audit trail, newest first (admins only)."""
    events = account_actions.list_audit(principal_of(request),
                                        database=request.app.state.database, limit=limit,
                                        job_id=job_id, actor=actor)
    return [audit.event_to_dict(event) for event in events]


def _token_to_dict(token: Credential) -> dict[str, Any]:
    def iso(moment):
        return moment.isoformat() if moment else None

    return {"id": token.id, "label": token.label, "hint": token.hint + "…",
            "created_at": iso(token.created_at), "expires_at": iso(token.expires_at),
            "last_used_at": iso(token.last_used_at), "revoked": token.revoked_at is not None}
