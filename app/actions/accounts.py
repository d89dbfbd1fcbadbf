"""Account actions: a principal's own API tokens (only once accounts exist), and for admins
the users and the audit trail."""
from __future__ import annotations

from app.actions.errors import Conflict, Forbidden, NotFound
from app.auth.principal import Principal
from tunedeck.accounts import audit, users as accounts
from tunedeck.db.engine import Database
from tunedeck.db.models import AuditEvent, Credential, User

OPEN_ACCESS_HAS_NO_ACCOUNT = (
    "TuneDeck runs with open access (no accounts): create one with "
    "`tunedeck user add NAME --admin` first")
ADMINS_ONLY = "only an admin may do this"


def require_account(principal: Principal) -> None:
    """Conflict while TuneDeck runs with open access: nobody has an account to act for."""
    if principal.open_access:
        raise Conflict(OPEN_ACCESS_HAS_NO_ACCOUNT)


def require_admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden(ADMINS_ONLY)


def list_tokens(principal: Principal, *, database: Database) -> list[Credential]:
    """The principal's API tokens (their hints, never their secrets)."""
    require_account(principal)
    with database.transaction() as session:
        return accounts.list_api_tokens(session=session, user_name=principal.name)


def create_token(principal: Principal, *, label: str, expires_in_days: float | None,
                 database: Database, client: str | None = None) -> str:
    """A new API token for the principal; its secret is returned only here."""
    require_account(principal)
    with database.transaction() as session:
        secret = accounts.create_api_token(session=session, user_name=principal.name,
                                           label=label, expires_in_days=expires_in_days)
        audit.record(session=session, actor=principal.name, action=audit.TOKEN_CREATED,
                     detail=label, client=client)
    return secret


def revoke_token(principal: Principal, token_id: int, *, database: Database,
                 client: str | None = None) -> None:
    """Revoke one of the principal's live tokens (any user's, for an admin); NotFound
    otherwise."""
    require_account(principal)
    with database.transaction() as session:
        revoked = accounts.revoke_api_token(
            session=session, token_id=token_id,
            user_name=None if principal.is_admin else principal.name)
        if revoked:
            audit.record(session=session, actor=principal.name, action=audit.TOKEN_REVOKED,
                         detail=f"token {token_id}", client=client)
    if not revoked:
        raise NotFound(f"no live token {token_id} of yours")


def list_users(principal: Principal, *, database: Database) -> list[User]:
    require_admin(principal)
    with database.transaction() as session:
        return accounts.list_users(session=session)


def create_user(principal: Principal, *, name: str, password: str, is_admin: bool,
                database: Database, client: str | None = None) -> None:
    """A new account (admins only); Conflict naming what was wrong (a taken name)."""
    require_admin(principal)
    try:
        with database.transaction() as session:
            accounts.create_user(session=session, name=name, password=password,
                                 is_admin=is_admin)
    except accounts.AccountError as error:
        raise Conflict(str(error)) from error
    with database.transaction() as session:
        audit.record(session=session, actor=principal.name, action=audit.USER_CREATED,
                     detail=f"{name} ({'admin' if is_admin else 'user'})", client=client)


def list_audit(principal: Principal, *, database: Database, limit: int, job_id: int | None,
               actor: str | None) -> list[AuditEvent]:
    """The audit trail, newest first (admins only)."""
    require_admin(principal)
    with database.transaction() as session:
        return audit.list_events(session=session, limit=limit, job_id=job_id, actor=actor)
