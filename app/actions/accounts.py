"""Account actions: a principal's own API tokens (only once accounts exist), and for admins
the users, anyone's tokens and the audit trail. The REST API and the CLI's `tunedeck user |
token | audit` (an admin acting as "cli", on the database) both act through these."""
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
                 database: Database, client: str | None = None,
                 user_name: str | None = None) -> str:
    """A new API token for the principal (for `user_name`, an admin); its secret is returned
    only here. NotFound for a user who does not exist."""
    require_account(principal)
    owner = principal.name if user_name is None else user_name
    if user_name is not None:  # someone named (the CLI names its user): an admin's act
        require_admin(principal)
    try:
        with database.transaction() as session:
            secret = accounts.create_api_token(session=session, user_name=owner, label=label,
                                               expires_in_days=expires_in_days)
            audit.record(session=session, actor=principal.name, action=audit.TOKEN_CREATED,
                         detail=label if user_name is None else f"for {owner}: {label}",
                         client=client)
    except accounts.AccountError as error:
        raise NotFound(str(error)) from error
    return secret


def list_everyones_tokens(principal: Principal, *, database: Database,
                          user_name: str | None = None) -> list[Credential]:
    """Every user's API tokens, or `user_name`'s (admins only)."""
    require_admin(principal)
    with database.transaction() as session:
        return accounts.list_api_tokens(session=session, user_name=user_name)


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
        raise NotFound(f"no live token {token_id}" + ("" if principal.is_admin else " of yours"))


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


def set_password(principal: Principal, *, name: str, password: str, database: Database,
                 client: str | None = None) -> None:
    """A user's new password, which ends their browser sign-ins (admins only)."""
    _change_user(principal, lambda session: accounts.set_password(
        session=session, name=name, password=password),
        detail=f"{name}: new password", database=database, client=client)


def set_disabled(principal: Principal, *, name: str, disabled: bool, database: Database,
                 client: str | None = None) -> None:
    """Disable or enable an account (admins only); its jobs stay."""
    _change_user(principal, lambda session: accounts.set_disabled(
        session=session, name=name, disabled=disabled),
        detail=f"{name}: {'disabled' if disabled else 'enabled'}", database=database,
        client=client)


def _change_user(principal: Principal, change, *, detail: str, database: Database,
                 client: str | None) -> None:
    """`change(session)` and its audit record in one transaction; Conflict naming what was
    wrong (no such user, a password too short)."""
    require_admin(principal)
    try:
        with database.transaction() as session:
            change(session)
            audit.record(session=session, actor=principal.name, action=audit.USER_CHANGED,
                         detail=detail, client=client)
    except accounts.AccountError as error:
        raise Conflict(str(error)) from error


def create_initial_admin(*, name: str, password: str, database: Database) -> bool:
    """`tunedeck migrate`'s first admin (TUNEDECK_INITIAL_ADMIN_PASSWORD), when no account
    exists yet; False when one does. Audited as done by "migrate": nobody signed in."""
    with database.transaction() as session:
        created = accounts.create_initial_admin(session=session, name=name, password=password)
        if created:
            audit.record(session=session, actor="migrate", action=audit.USER_CREATED,
                         detail=f"{name} (admin, initial)")
    return created


def list_audit(principal: Principal, *, database: Database, limit: int, job_id: int | None,
               actor: str | None) -> list[AuditEvent]:
    """The audit trail, newest first (admins only)."""
    require_admin(principal)
    with database.transaction() as session:
        return audit.list_events(session=session, limit=limit, job_id=job_id, actor=actor)
