"""Accounts: users with Argon2id-hashed passwords, API tokens and browser sessions.

A token or session secret is shown once, when made; the database keeps its SHA-256 only
(the secret is 256 random bits, so a fast hash is enough there; passwords, chosen by people,
get Argon2id). Hashes of earlier releases (scrypt) still verify, and are replaced by an
Argon2id hash at the account's next successful sign-in. The caller owns the transaction.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from tunedeck.db.models import Credential, User, as_utc, utc_now
from tunedeck.units import MIB

USER_ROLE, ADMIN_ROLE = "user", "admin"
ROLES = (USER_ROLE, ADMIN_ROLE)
TOKEN_KIND, SESSION_KIND = "token", "session"
TOKEN_PREFIX = "tdk_"
USER_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024
# Argon2id with OWASP's first recommended parameters (Password Storage Cheat Sheet):
# 19 MiB of memory, 2 iterations, 1 lane.
PASSWORDS = PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)
SCRYPT_SCHEME = "scrypt"  # the hashes of earlier releases: verified, then replaced
# Last-used times are written at most this often, so a busy token does not write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class AccountError(ValueError):
    """A refused account change, with a message naming what was wrong."""


@dataclass(frozen=True)
class Account:
    """Who a password, token or session belongs to, detached from the session."""

    name: str
    is_admin: bool


def hash_password(password: str) -> str:
    """"$argon2id$v=19$m=19456,t=2,p=1$..." (argon2-cffi's encoding: salt and parameters in it)."""
    return PASSWORDS.hash(password)


def password_matches(password: str, stored: str) -> bool:
    if stored.startswith(SCRYPT_SCHEME + "$"):
        return _scrypt_matches(password, stored)
    try:
        return PASSWORDS.verify(stored, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def needs_rehash(stored: str) -> bool:
    """A hash of an earlier scheme or of other parameters than today's."""
    return stored.startswith(SCRYPT_SCHEME + "$") or PASSWORDS.check_needs_rehash(stored)


def _scrypt_matches(password: str, stored: str) -> bool:
    """Earlier releases' "scrypt$N$r$p$salt$digest"."""
    try:
        _scheme, n, r, p, salt, digest = stored.split("$")
        actual = hashlib.scrypt(password.encode("utf-8", "surrogatepass"),
                                salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                                maxmem=64 * MIB, dklen=32)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, base64.b64decode(digest))


def _secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


# --- users -----------------------------------------------------------------------------

def check_user_name(name: str) -> str:
    if not USER_NAME_PATTERN.match(name or ""):
        raise AccountError(f"user name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
                           "starting with a letter or digit")
    return name


def check_password(password: str) -> str:
    if not MIN_PASSWORD_LENGTH <= len(password) <= MAX_PASSWORD_LENGTH:
        raise AccountError(f"password: {MIN_PASSWORD_LENGTH} to {MAX_PASSWORD_LENGTH} "
                           "characters")
    return password


def create_user(*, session: Session, name: str, password: str, is_admin: bool = False) -> Account:
    check_user_name(name)
    check_password(password)
    if session.get(User, name) is not None:
        raise AccountError(f"user {name!r} exists already")
    session.add(User(name=name, password_hash=hash_password(password),
                     role=ADMIN_ROLE if is_admin else USER_ROLE, disabled=False))
    session.flush()
    return Account(name=name, is_admin=is_admin)


def create_initial_admin(*, session: Session, name: str, password: str) -> bool:
    """The first account, an admin, when there is none yet (deployments bootstrap with it);
    False when accounts exist already, whatever their names."""
    if any_users(session=session):
        return False
    create_user(session=session, name=name, password=password, is_admin=True)
    return True


def set_password(*, session: Session, name: str, password: str) -> None:
    """A new password also ends the user's browser sessions (tokens stay: revoke those
    apart)."""
    user = _existing_user(session, name)
    user.password_hash = hash_password(check_password(password))
    _revoke(session, Credential.user_name == name, Credential.kind == SESSION_KIND)


def set_disabled(*, session: Session, name: str, disabled: bool) -> None:
    """A disabled user can neither sign in nor use a token; their jobs stay."""
    _existing_user(session, name).disabled = disabled


def list_users(*, session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


def any_users(*, session: Session) -> bool:
    return session.scalar(select(func.count()).select_from(User)) > 0


def _existing_user(session: Session, name: str) -> User:
    user = session.get(User, name)
    if user is None:
        raise AccountError(f"user {name!r} does not exist")
    return user


def authenticate_password(*, session: Session, name: str, password: str) -> Account | None:
    user = session.get(User, name) if USER_NAME_PATTERN.match(name or "") else None
    if user is None:
        # The same work as a real check, so response times do not tell which names exist.
        password_matches(password, _DUMMY_HASH)
        return None
    if not password_matches(password, user.password_hash) or user.disabled:
        return None
    if needs_rehash(user.password_hash):  # only now is the password itself at hand
        user.password_hash = hash_password(password)
    return Account(name=user.name, is_admin=user.role == ADMIN_ROLE)


_DUMMY_HASH = hash_password(secrets.token_urlsafe(16))


# --- tokens and sessions -----------------------------------------------------------------

def create_api_token(*, session: Session, user_name: str, label: str = "",
                     expires_in_days: float | None = None) -> str:
    """A new token for the REST API and the CLI; its secret is returned once."""
    expires_at = utc_now() + timedelta(days=expires_in_days) if expires_in_days else None
    return _create_credential(session, user_name, TOKEN_KIND, label=label, expires_at=expires_at)


def create_browser_session(*, session: Session, user_name: str, lifetime: timedelta) -> str:
    return _create_credential(session, user_name, SESSION_KIND, expires_at=utc_now() + lifetime)


def _create_credential(session: Session, user_name: str, kind: str, *, label: str = "",
                       expires_at: datetime | None) -> str:
    _existing_user(session, user_name)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32) if kind == TOKEN_KIND else secrets.token_urlsafe(32)
    session.add(Credential(secret_sha256=_secret_digest(secret), kind=kind, user_name=user_name,
                           label=label[:200], hint=secret[:len(TOKEN_PREFIX) + 4] if kind == TOKEN_KIND else "",
                           expires_at=expires_at))
    session.flush()
    return secret


def account_for_secret(*, session: Session, secret: str, kind: str) -> Account | None:
    """The user a live, unrevoked, unexpired token or session belongs to (None otherwise,
    and for a disabled user)."""
    if not secret or len(secret) > 200:
        return None
    row = session.execute(
        select(Credential, User).join(User, User.name == Credential.user_name).where(
            Credential.secret_sha256 == _secret_digest(secret), Credential.kind == kind)
    ).first()
    if row is None:
        return None
    credential, user = row
    now = utc_now()
    if credential.revoked_at is not None or user.disabled or (
            credential.expires_at is not None and as_utc(credential.expires_at) <= now):
        return None
    if credential.last_used_at is None or now - as_utc(credential.last_used_at) > LAST_USED_RESOLUTION:
        credential.last_used_at = now
    return Account(name=user.name, is_admin=user.role == ADMIN_ROLE)


def end_browser_session(*, session: Session, secret: str) -> None:
    _revoke(session, Credential.secret_sha256 == _secret_digest(secret),
            Credential.kind == SESSION_KIND)


def list_api_tokens(*, session: Session, user_name: str | None = None) -> list[Credential]:
    query = select(Credential).where(Credential.kind == TOKEN_KIND)
    if user_name is not None:
        query = query.where(Credential.user_name == user_name)
    return list(session.scalars(query.order_by(Credential.id)))


def revoke_api_token(*, session: Session, token_id: int, user_name: str | None = None) -> bool:
    """Revoke token `token_id` (only if it is `user_name`'s, when given); False when there
    is no such live token."""
    conditions = [Credential.id == token_id, Credential.kind == TOKEN_KIND,
                  Credential.revoked_at.is_(None)]
    if user_name is not None:
        conditions.append(Credential.user_name == user_name)
    return _revoke(session, *conditions) > 0


def _revoke(session: Session, *conditions) -> int:
    result = session.execute(update(Credential).where(*conditions).values(revoked_at=utc_now()))
    return result.rowcount
