"""The sign-in page (GET/POST /login) and sign-out (/logout): a plain HTML form outside
Gradio, so that nothing of the UI loads before the access middleware lets it."""
from __future__ import annotations

import html
import math
from datetime import timedelta
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.auth.middleware import SESSION_COOKIE
from tunedeck.accounts import audit, throttle, users as accounts

sign_in_router = APIRouter(include_in_schema=False)

MAX_FORM_BYTES = 8192


@sign_in_router.get("/login")
def sign_in_page(next: str = "/") -> HTMLResponse:
    return HTMLResponse(_page(next=_safe_target(next)))


@sign_in_router.post("/login")
async def sign_in(request: Request) -> Response:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return HTMLResponse(_page(error="the form is too large"), status_code=413)
    form = {key: values[0] for key, values in parse_qs(body.decode("utf-8", "replace")).items()}
    name, password = form.get("username", ""), form.get("password", "")
    target = _safe_target(form.get("next", "/"))
    settings = request.app.state.settings
    client = request.client.host if request.client else None
    with request.app.state.database.transaction() as session:
        # Too many wrong passwords lately, for this account or from this address: refused
        # before the password is even checked, so guessing on gains nothing.
        wait = throttle.sign_in_wait(session=session, name=name[:64] or None, client=client)
        account = None
        if wait > 0:
            audit.record(session=session, actor=name[:64] or "?",
                         action=audit.SIGN_IN_THROTTLED, client=client,
                         detail=f"{wait:.0f} s to wait")
        else:
            account = accounts.authenticate_password(session=session, name=name,
                                                     password=password)
            if account is None:
                audit.record(session=session, actor=name[:64] or "?",
                             action=audit.SIGN_IN_FAILED, client=client)
            else:
                secret = accounts.create_browser_session(
                    session=session, user_name=account.name,
                    lifetime=timedelta(hours=settings.session_hours))
                audit.record(session=session, actor=account.name, action=audit.SIGN_IN,
                             client=client)
    if wait > 0:
        seconds = math.ceil(wait)
        return HTMLResponse(_page(next=target, error=f"too many failed sign-ins: try again in "
                                                     f"{seconds} s"),
                            status_code=429, headers={"Retry-After": str(seconds)})
    if account is None:
        return HTMLResponse(_page(next=target, error="wrong user name or password"),
                            status_code=401)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(SESSION_COOKIE, secret, max_age=int(settings.session_hours * 3600),
                        httponly=True, samesite="lax", secure=settings.cookie_secure, path="/")
    return response


@sign_in_router.api_route("/logout", methods=["GET", "POST"])
def sign_out(request: Request) -> Response:
    secret = request.cookies.get(SESSION_COOKIE)
    if secret:
        with request.app.state.database.transaction() as session:
            account = accounts.account_for_secret(session=session, secret=secret,
                                                  kind=accounts.SESSION_KIND)
            accounts.end_browser_session(session=session, secret=secret)
            if account is not None:
                audit.record(session=session, actor=account.name, action=audit.SIGN_OUT,
                             client=request.client.host if request.client else None)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def _safe_target(target: str) -> str:
    """Only a path on this server: never another site (an open redirect)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _page(*, next: str = "/", error: str | None = None) -> str:
    message = f'<p id="sign-in-error" role="alert">{html.escape(error)}</p>' if error else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in · TuneDeck</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body {{ font-family: system-ui, sans-serif; background: #f6f7f9; display: flex;
        justify-content: center; padding-top: 12vh; margin: 0; }}
 form {{ background: white; padding: 2rem 2.5rem; border-radius: 10px; width: 20rem;
        box-shadow: 0 2px 12px rgba(0,0,0,.08); }}
 h1 {{ font-size: 1.4rem; margin: 0 0 1.2rem; }}
 label {{ display: block; margin: .8rem 0 .3rem; font-size: .9rem; }}
 input {{ width: 100%; box-sizing: border-box; padding: .55rem; font-size: 1rem; }}
 button {{ margin-top: 1.3rem; width: 100%; padding: .6rem; font-size: 1rem; }}
 #sign-in-error {{ color: #b00020; }}
</style></head>
<body><form method="post" action="/login">
<h1>TuneDeck</h1>{message}
<input type="hidden" name="next" value="{html.escape(next)}">
<label for="username">User</label>
<input id="username" name="username" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button id="sign-in" type="submit">Sign in</button>
</form></body></html>"""
