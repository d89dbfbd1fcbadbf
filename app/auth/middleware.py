"""Who may use TuneDeck: one ASGI middleware in front of every route, REST and Gradio alike
(Gradio's own `auth=` covers only its part, so it is not used).

A request acts for the account of its `Authorization: Bearer` API token or its browser
session cookie. With no accounts at all, TuneDeck runs open, but only when it listens on
loopback: it refuses to start on any other address until an account exists.

GET /metrics (Prometheus) is answered without credentials to a client on loopback (a
Prometheus on this host), and to `Authorization: Bearer TUNEDECK_METRICS_TOKEN` from
anywhere; that token opens nothing else. Otherwise it needs an account, as the API does.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
import math
import time
from dataclasses import dataclass
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from pydantic import SecretStr
from starlette.requests import Request

from app.auth.principal import OPEN_PRINCIPAL, Principal
from app.auth.vouched_credentials import VouchedCredentials
from tunedeck.accounts import audit, throttle, users as accounts
from tunedeck.db.engine import Database
from tunedeck.db.outage import is_database_unreachable

log = logging.getLogger(__name__)

SESSION_COOKIE = "tunedeck_session"
# Reachable without signing in: the health probe and the sign-in page itself.
PUBLIC_PATHS = frozenset({"/healthz", "/login", "/logout"})
# Prometheus' scrape: open to loopback and to the scrape token (see above).
SCRAPE_PATH = "/metrics"
# How long "are there any accounts?" is trusted: the first account made with the CLI
# closes open access within this long, without a restart.
ACCOUNTS_CHECK_SECONDS = 2.0
# Stands for "no credential" in VouchedCredentials: a request without one acts as the open
# principal only where no accounts exist, and that is what it was vouched as.
OPEN_CREDENTIAL = "open"
OPEN_ACCESS_WARNING = (
    "TuneDeck runs with open access: no accounts exist, so every request acts as an admin. "
    "It listens on loopback only, so only this machine can reach it. Create an account "
    "with `tunedeck user add NAME --admin` to require sign-in.")


@dataclass(frozen=True)
class Throttled:
    """Credentials from this address are refused for `seconds` more."""

    seconds: float


class OpenAccessRefused(RuntimeError):
    """No accounts exist and the server would listen beyond loopback."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _is_loopback_address(address: str) -> bool:
    """A connection's peer address (never a name: "localhost" there is not a peer)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def check_open_access_allowed(*, database: Database, host: str) -> bool:
    """True when TuneDeck will run open (no accounts, loopback); raises when it would run
    open on an address others can reach."""
    with database.transaction() as session:
        has_accounts = accounts.any_users(session=session)
    if has_accounts:
        return False
    if not is_loopback(host):
        raise OpenAccessRefused(
            f"refusing to listen on {host} with no accounts: every route would be open to the "
            "network. Create an admin first (`tunedeck user add NAME --admin`), or listen on "
            "127.0.0.1.")
    log.warning(OPEN_ACCESS_WARNING)
    return True


class AccessMiddleware:
    """Puts the request's Principal in `request.state.principal`, or answers 401 (API) /
    a redirect to the sign-in page (a browser asking for a page)."""

    def __init__(self, app, *, database: Database, metrics_token: SecretStr | None = None):
        self.app = app
        self.database = database
        self._metrics_token = metrics_token
        self._accounts_exist: bool | None = None
        self._checked_at = 0.0
        self._lock = threading.Lock()
        self._vouched = VouchedCredentials()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if scope["type"] == "http" and scope["path"] == SCRAPE_PATH and self._may_scrape(request):
            await self.app(scope, receive, send)
            return
        credential = _credential_of(request)
        try:
            principal, refusal = await run_in_threadpool(self._resolve, request)
        except Exception as error:
            if not is_database_unreachable(error):
                raise
            # A credential this web checked a moment ago stays good while nobody could have
            # revoked it (revoking writes to the database): the page's own requests go on
            # reaching their handlers, which wait the outage out. Anything else is refused
            # with the outage's 503 (app/monitoring/database_outage.py).
            principal, refusal = self._vouched_during_outage(credential), None
            if principal is None and scope["path"] not in PUBLIC_PATHS:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1013})  # try again later
                    return
                raise
        else:
            if principal is None:
                self._vouched.forget(credential)  # refused now: not vouched for later
            else:
                self._vouched.remember(credential, principal)
        if isinstance(refusal, Throttled):
            seconds = str(math.ceil(refusal.seconds))
            await _json_response(send, 429, {"detail": f"too many refused credentials from "
                                             f"this address: try again in {seconds} s"},
                                 headers=[(b"retry-after", seconds.encode())])
        elif principal is not None:
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, send)
        elif scope["path"] in PUBLIC_PATHS and refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        elif refusal is None and _wants_a_page(request):
            await _redirect(send, "/login?next=" + quote(_local_target(request), safe="/"))
        else:
            await _json_response(send, 401, {"detail": refusal or (
                "sign in, or send an API token: Authorization: Bearer <token> "
                "(make one with `tunedeck token create USER`)")},
                headers=[(b"www-authenticate", b"Bearer")])

    def _vouched_during_outage(self, credential: str | None) -> Principal | None:
        # Open access ends when the first account is made: never vouch for "open" after that.
        if credential == OPEN_CREDENTIAL and self._accounts_exist:
            return None
        return self._vouched.principal_for(credential)

    def _may_scrape(self, request: Request) -> bool:
        if request.client is not None and _is_loopback_address(request.client.host):
            return True
        if self._metrics_token is None:
            return False
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        # Constant time: the token must not leak a character at a time.
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self._metrics_token.get_secret_value().encode())

    def _resolve(self, request: Request) -> tuple[Principal | None, "str | Throttled | None"]:
        """(principal, None), or (None, why a presented credential was refused, or the
        throttle's wait for an address whose tokens were refused too often)."""
        authorization = request.headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None, "Authorization must be 'Bearer <token>'"
            return self._bearer(token.strip(), request.client.host if request.client else None)
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie:
            account = self._account(cookie, accounts.SESSION_KIND)
            if account is not None:
                return Principal(name=account.name, is_admin=account.is_admin), None
        if not self._accounts_exist_now():
            return OPEN_PRINCIPAL, None
        return None, None

    def _bearer(self, token: str, client: str | None
                ) -> tuple[Principal | None, "str | Throttled | None"]:
        """A token guessed at is a failed sign-in of its address: audited, and throttled as
        the sign-in page is (tunedeck/accounts/throttle.py)."""
        with self.database.transaction() as session:
            wait = throttle.sign_in_wait(session=session, name=None, client=client)
            if wait > 0:
                return None, Throttled(wait)
            account = accounts.account_for_secret(session=session, secret=token,
                                                  kind=accounts.TOKEN_KIND)
            if account is None:
                audit.record(session=session, actor="?", action=audit.TOKEN_REFUSED,
                             client=client, detail="an API token that matches no live token")
                return None, "the API token is invalid, expired or revoked"
        return Principal(name=account.name, is_admin=account.is_admin), None

    def _account(self, secret: str, kind: str) -> accounts.Account | None:
        with self.database.transaction() as session:
            return accounts.account_for_secret(session=session, secret=secret, kind=kind)

    def _accounts_exist_now(self) -> bool:
        with self._lock:
            if self._accounts_exist:  # accounts are disabled, never deleted: once on, stays on
                return True
            if (self._accounts_exist is not None
                    and time.monotonic() - self._checked_at < ACCOUNTS_CHECK_SECONDS):
                return False
        with self.database.transaction() as session:
            exists = accounts.any_users(session=session)
        with self._lock:
            self._accounts_exist, self._checked_at = exists, time.monotonic()
        return exists


def _credential_of(request: Request) -> str | None:
    """What identifies the request's caller: its bearer token, its session cookie, or for
    an open TuneDeck (no accounts) the open marker, so it stays open through an outage."""
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        return f"bearer:{token.strip()}" if scheme.lower() == "bearer" and token.strip() else None
    cookie = request.cookies.get(SESSION_COOKIE)
    return f"session:{cookie}" if cookie else OPEN_CREDENTIAL


def _wants_a_page(request: Request) -> bool:
    return (request.method in ("GET", "HEAD") and not request.url.path.startswith("/api/")
            and "text/html" in request.headers.get("accept", ""))


def _local_target(request: Request) -> str:
    target = request.url.path
    return target + ("?" + request.url.query if request.url.query else "")


async def _redirect(send, location: str) -> None:
    await send({"type": "http.response.start", "status": 303,
                "headers": [(b"location", location.encode("latin-1", "replace")),
                            (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _json_response(send, status: int, body: dict, *, headers=()) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()), *headers]})
    await send({"type": "http.response.body", "body": payload})
