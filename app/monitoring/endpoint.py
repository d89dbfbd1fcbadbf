"""GET /metrics: one registry per app (tests build many apps in one process), holding the
cluster's series, this process's request latencies and the chart cache's reads."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from app.monitoring.cluster_collector import ClusterCollector
from app.monitoring.request_latency import request_histogram
from tunedeck.cluster.sweep import LOST_WORKERS_COLLECTOR
from tunedeck.db.engine import Database
from tunedeck.metrics.chart_cache import CHART_CACHE_COLLECTOR

METRICS_PATH = "/metrics"

metrics_router = APIRouter()


def web_registry(database: Database) -> tuple[CollectorRegistry, object]:
    """(the registry, its request-latency histogram)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(database))
    registry.register(CHART_CACHE_COLLECTOR)
    registry.register(LOST_WORKERS_COLLECTOR)
    return registry, request_histogram(registry)


@metrics_router.get(METRICS_PATH, include_in_schema=False)
async def prometheus_metrics(request: Request) -> Response:
    # The cluster collector queries the database: off the event loop.
    body = await run_in_threadpool(generate_latest, request.app.state.metrics_registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
