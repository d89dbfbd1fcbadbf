"""The web's one answer while the database is unreachable: 503, `Retry-After`, and a body
saying so, on every route, counted for GET /metrics.

A route, the access check or anything under them raises whatever the driver raised
(tunedeck/db/outage.py tells which errors those are); this middleware, outside them all,
turns it into that answer instead of Starlette's 500, which a client cannot tell from a
bug. Any other error stays a 500.
"""
from __future__ import annotations

import json
import logging

from prometheus_client import CollectorRegistry, Counter

from tunedeck.db.outage import RETRY_AFTER_SECONDS, is_database_unreachable, unreachable_body

log = logging.getLogger(__name__)


def unreachable_counter(registry: CollectorRegistry) -> Counter:
    return Counter("tunedeck_database_unreachable_responses",
                   "requests answered 503 because the database was unreachable",
                   registry=registry)


RETRY_AFTER_HEADER = (b"retry-after", str(RETRY_AFTER_SECONDS).encode())


class DatabaseOutageMiddleware:
    def __init__(self, app, *, counter: Counter):
        self.app = app
        self.counter = counter

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = {"answer": False}

        async def send_and_note(message):
            if message["type"] == "http.response.start":
                started["answer"] = True
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception as error:
            if not is_database_unreachable(error) or started["answer"]:
                raise
            # One line, not a traceback per request: an outage sends many.
            log.warning("%s %s: the database is unreachable (%s)", scope.get("method"),
                        scope.get("path"), type(error).__name__)
            self.counter.inc()
            await answer_unreachable(send)


async def answer_unreachable(send) -> None:
    payload = json.dumps(unreachable_body()).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            RETRY_AFTER_HEADER]})
    await send({"type": "http.response.body", "body": payload})
