"""The web's access log and request ids: each request gets an id (the caller's X-Request-ID
when it is a plain token, else a new one), sent back in X-Request-ID and on every log line
written while it is served (tunedeck/services/logs.py); once answered, one line: method,
path, status, milliseconds, client address.

The line has no query string, header or cookie: tokens and session secrets travel in
headers, and nothing a client sends is logged but the path. The page's own polling (Gradio's
queue and assets) is logged at DEBUG, so the access log is the API's and the pages'."""
from __future__ import annotations

import logging
import re
import time
import uuid

from tunedeck.services.logs import REQUEST_ID

log = logging.getLogger("tunedeck.access")
_CALLER_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Gradio's every-second traffic: its queue, heartbeats, uploads' progress and static files.
QUIET_PREFIXES = ("/gradio_api/", "/assets/", "/static/", "/theme.css", "/favicon")


class RequestLog:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        status = {"code": 500}

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            path = scope.get("path", "")
            level = logging.DEBUG if path.startswith(QUIET_PREFIXES) else logging.INFO
            client = (scope.get("client") or ("-",))[0]
            log.log(level, "%s %s %d %.1f ms client %s", scope.get("method"), path,
                    status["code"], (time.perf_counter() - started) * 1000, client)
            REQUEST_ID.reset(token)


def _request_id(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            caller = value.decode("latin-1")
            if _CALLER_ID.match(caller):
                return caller
    return uuid.uuid4().hex[:16]
