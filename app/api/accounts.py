"""The account routes: who am I, my API tokens, and for admins the users and the audit
trail."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from app.auth.job_access import record_action
from app.views.jobs import MAX_JOB_ID
from app.auth.principal import Principal, principal_of
from tunedeck.accounts import users as accounts
from tunedeck.accounts import audit
from tunedeck.db.models import Credential

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


def _principal_with_account(request: Request) -> Principal:
    principal = principal_of(request)
    if principal.open_access:
        raise HTTPException(status_code=409, detail=(
            "TuneDeck runs with open access (no accounts): create one with "
            "`tunedeck user add NAME --admin` first"))
    return principal


def _admin(request: Request) -> Principal:
    principal = principal_of(request)
    if not principal.is_admin:
        raise HTTPException(status_code=403, detail="only an admin may do this")
    return principal


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


@account_router.get("/api/me")
def me(request: Request) -> dict[str, Any]:
    principal = principal_of(request)
    return {"name": principal.name, "admin": principal.is_admin,
            "open_access": principal.open_access}


@account_router.get("/api/tokens")
def list_tokens(request: Request) -> list[dict[str, Any]]:
    """Your API tokens (never their secrets)."""
    principal = _principal_with_account(request)
    with request.app.state.database.transaction() as session:
        return [_token_to_dict(token) for token in
                accounts.list_api_tokens(session=session, user_name=principal.name)]


@account_router.post("/api/tokens", status_code=201)
def create_token(body: TokenRequest, request: Request) -> dict[str, Any]:
    """A new API token for yourself; its secret is in this answer only."""
    principal = _principal_with_account(request)
    with request.app.state.database.transaction() as session:
        secret = accounts.create_api_token(session=session, user_name=principal.name,
                                           label=body.label, expires_in_days=body.expires_in_days)
        audit.record(session=session, actor=principal.name, action=audit.TOKEN_CREATED,
                     detail=body.label, client=_client(request))
    return {"token": secret, "label": body.label}


@account_router.delete("/api/tokens/{token_id}", status_code=204)
def revoke_token(token_id: Annotated[int, Path(ge=1, le=MAX_JOB_ID)], request: Request) -> None:
    principal = _principal_with_account(request)
    with request.app.state.database.transaction() as session:
        revoked = accounts.revoke_api_token(
            session=session, token_id=token_id,
            user_name=None if principal.is_admin else principal.name)
        if revoked:
            audit.record(session=session, actor=principal.name, action=audit.TOKEN_REVOKED,
                         detail=f"token {token_id}", client=_client(request))
    if not revoked:
        raise HTTPException(status_code=404, detail=f"no live token {token_id} of yours")


@account_router.get("/api/users")
def list_users(request: Request) -> list[dict[str, Any]]:
    _admin(request)
    with request.app.state.database.transaction() as session:
        return [{"name": user.name, "admin": user.role == accounts.ADMIN_ROLE,
                 "disabled": user.disabled, "created_at": user.created_at.isoformat()}
                for user in accounts.list_users(session=session)]


@account_router.post("/api/users", status_code=201)
def create_user(body: UserRequest, request: Request) -> dict[str, Any]:
    principal = _admin(request)
    try:
        with request.app.state.database.transaction() as session:
            accounts.create_user(session=session, name=body.name, password=body.password,
                                 is_admin=body.admin)
    except accounts.AccountError as error:
        raise HTTPException(status_code=409, detail=str(error)) from error
    record_action(database=request.app.state.database, principal=principal,
                  action=audit.USER_CREATED, client=_client(request),
                  detail=f"{body.name} ({'admin' if body.admin else 'user'})")
    return {"name": body.name, "admin": body.admin}


@account_router.get("/api/audit")
def list_audit(request: Request, limit: int = Query(200, ge=1, le=10_000),
               job_id: int | None = Query(None, ge=1, le=MAX_JOB_ID),
               actor: str | None = Query(None, max_length=64)) -> list[dict[str, Any]]:
    """The audit trail, newest first (admins only)."""
    _admin(request)
    with request.app.state.database.transaction() as session:
        return [audit.event_to_dict(event) for event in
                audit.list_events(session=session, limit=limit, job_id=job_id, actor=actor)]


def _token_to_dict(token: Credential) -> dict[str, Any]:
    def iso(moment):
        return moment.isoformat() if moment else None

    return {"id": token.id, "label": token.label, "hint": token.hint + "…",
            "created_at": iso(token.created_at), "expires_at": iso(token.expires_at),
            "last_used_at": iso(token.last_used_at), "revoked": token.revoked_at is not None}
