"""The web application: FastAPI with the REST API, and the Gradio UI mounted at /."""
from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import math  # noqa: E402
from contextlib import asynccontextmanager  # noqa: E402
from typing import Any, AsyncIterator  # noqa: E402

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.encoders import jsonable_encoder  # noqa: E402
from fastapi.exceptions import RequestValidationError  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from app.actions.errors import ActionError  # noqa: E402
from app.api.accounts import account_router  # noqa: E402
from app.api.errors import action_error_response  # noqa: E402
from app.api.generation import generation_router  # noqa: E402
from app.api.jobs import router  # noqa: E402
from app.api.preflight import preflight_router  # noqa: E402
from app.api.presets import preset_router  # noqa: E402
from app.api.uploads import upload_router  # noqa: E402
from app.auth.middleware import AccessMiddleware, check_open_access_allowed  # noqa: E402
from app.auth.sign_in import sign_in_router  # noqa: E402
from app.monitoring.endpoint import metrics_router, web_registry  # noqa: E402
from app.monitoring.database_outage import (DatabaseOutageMiddleware,  # noqa: E402
                                            unreachable_counter)
from app.monitoring.request_latency import RequestLatencyMiddleware  # noqa: E402
from tunedeck.services.broker import enqueue_job, make_celery  # noqa: E402
from tunedeck.cluster.sweep import Sweeper  # noqa: E402
from tunedeck.db.engine import Database  # noqa: E402
from tunedeck.settings import Settings, load_settings  # noqa: E402
from app.auth.openapi_credentials import declare_credentials  # noqa: E402
from app.request_log import RequestLog  # noqa: E402
from app.api.docs_page import add_offline_docs  # noqa: E402


def create_app(settings: Settings | None = None, *, with_ui: bool = True,
               with_sweeper: bool = True) -> FastAPI:
    """The served app. While it serves (its lifespan), it runs the cluster sweep unless
    `with_sweeper` is false."""
    settings = settings or load_settings()
    # docs_url/redoc_url None: FastAPI's own pages load their scripts from a CDN.
    api = FastAPI(title="TuneDeck", version="0.1.0", docs_url=None, redoc_url=None,
                  lifespan=_sweeping_cluster if with_sweeper else None)
    add_offline_docs(api)
    api.state.settings = settings
    api.state.database = Database(settings.resolved_database_url)
    api.state.celery_app = make_celery(settings)
    # Refuses (OpenAccessRefused) to serve beyond loopback while no account exists.
    api.state.open_access = check_open_access_allowed(database=api.state.database,
                                                      host=settings.host)
    api.include_router(router)
    api.include_router(upload_router)
    api.include_router(preflight_router)
    api.include_router(generation_router)
    api.include_router(preset_router)
    api.include_router(sign_in_router)
    api.include_router(account_router)
    api.include_router(metrics_router)
    api.state.metrics_registry, request_latency = web_registry(api.state.database)
    api.add_exception_handler(RequestValidationError, json_safe_validation_error)
    api.add_exception_handler(ActionError, action_error_response)
    declare_credentials(api)
    if with_ui:
        import gradio as gr

        from app.ui.build_ui import build_ui
        from app.ui.compare.compare_handlers import line_dash_css
        from app.ui.charts.page_assets import CHART_CSS
        from app.ui.page_chrome import CSS, HEAD

        blocks = build_ui(database=api.state.database, celery_app=api.state.celery_app,
                          worker_lost_seconds=settings.worker_lost_seconds,
                          settings=settings)
        # Gradio's own upload route (the New job form's dataset upload) has the API's cap.
        # No "Use via API" in the footer: it lists Gradio's internal events (/lambda_13, …),
        # which are not an API anyone should script against; the page links /docs instead.
        api = gr.mount_gradio_app(api, blocks, path="/", max_file_size=settings.max_upload_bytes,
                                  css=CSS + CHART_CSS + line_dash_css(), head=HEAD,
                                  footer_links=["settings"])
        _slow_down_idle_queue_polling(blocks)
    # Outermost, so no route (REST, Gradio's own, its files) answers before it has decided.
    api.add_middleware(AccessMiddleware, database=api.state.database,
                       metrics_token=settings.metrics_token)
    # Outside the access check, which asks the database too: an unreachable database is
    # one 503 with Retry-After on every route, never a 500.
    api.add_middleware(DatabaseOutageMiddleware,
                       counter=unreachable_counter(api.state.metrics_registry))
    # Outside the access check, so refused requests are timed (and logged) too; the log's
    # request id outermost, so every line of a request carries it.
    api.add_middleware(RequestLatencyMiddleware, histogram=request_latency)
    api.add_middleware(RequestLog)
    return api


@asynccontextmanager
async def _sweeping_cluster(api: FastAPI) -> AsyncIterator[None]:
    """The web sweeps too: with one worker host, nobody else would see that worker die."""
    sweeper = Sweeper(database=api.state.database, settings=api.state.settings,
                      send=lambda job_id, spec: enqueue_job(api.state.celery_app, job_id, spec))
    sweeping = sweeper.start_thread()
    try:
        yield
    finally:
        sweeping.stop()


async def json_safe_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    """FastAPI's own 422, except that each rejected input is echoed as valid JSON.

    The default handler echoes the input as is: a NaN or Infinity the JSON body carried
    (Python's parser accepts them) or a lone UTF-16 surrogate ("\\ud800") then fails to
    render, and the 422 becomes a 500.
    """
    return JSONResponse(status_code=422,
                        content={"detail": _json_safe(jsonable_encoder(error.errors()))})


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # "nan", "inf", "-inf": what was sent, as text
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_json_safe(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


# Gradio's event queue polls every 1 ms while idle, which costs a tenth of a core; on a
# training host that core belongs to the ranks. 50 ms (its Windows default) is far below
# the UI's 1 s refresh.
IDLE_QUEUE_POLL_SECONDS = 0.05
IDLE_PROGRESS_POLL_SECONDS = 0.2


def _slow_down_idle_queue_polling(blocks) -> None:
    queue = getattr(blocks, "_queue", None)
    if queue is not None and hasattr(queue, "sleep_when_free"):
        queue.sleep_when_free = IDLE_QUEUE_POLL_SECONDS
        queue.progress_update_sleep_when_free = IDLE_PROGRESS_POLL_SECONDS
