"""API request latency by route and status, for GET /metrics.

Labelled with the route's template (`/api/jobs/{job_id}/metrics`, Gradio's own
`/gradio_api/queue/join`), never the raw path, so job ids do not make a series each; a path
no route matched (a 404, or a request refused before routing) is "unmatched".
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Histogram

UNMATCHED_ROUTE = "unmatched"
# A client may send any method name: the rest are one label value, not a series each.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"
# From a cached health probe to a 100,000-point chart read under load.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def request_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram("tunedeck_http_request_duration_seconds",
                     "time from a request's arrival to its answer's last byte, by route "
                     "template, method and status", ["route", "method", "status"],
                     buckets=LATENCY_BUCKETS, registry=registry)


class RequestLatencyMiddleware:
    """Outermost, so refused requests (401) are timed too."""

    def __init__(self, app, *, histogram: Histogram):
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}  # what it is when the app raises before answering

        async def send_and_note(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                status["done"] = time.perf_counter()

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            ended = status.get("done", time.perf_counter())
            method = scope["method"] if scope["method"] in METHODS else OTHER_METHOD
            self.histogram.labels(_route_of(scope), method,
                                  str(status["code"])).observe(ended - started)


def _route_of(scope) -> str:
    # FastAPI's routers (ours and the mounted Gradio app's) put the matched route into the
    # request's scope, which the mount shares with us.
    path = getattr(scope.get("route"), "path", None)
    return path or UNMATCHED_ROUTE
