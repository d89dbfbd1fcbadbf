"""The REST API's interactive docs at /docs, drawn from files this server holds: FastAPI's
default page loads Swagger UI from a CDN, so it is blank on a machine without internet
(a GPU host behind a firewall is the usual TuneDeck machine)."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from importlib.resources import files

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs-assets"
# Swagger UI 5 (it reads FastAPI's OpenAPI 3.1; Swagger UI 4 cannot draw it).
ASSETS = files("fastapi_offline") / "static"


def add_offline_docs(api: FastAPI) -> None:
    """Serve Swagger UI's own files under ASSETS_PATH and the docs page at DOCS_PATH
    (`api` is made with docs_url=None, so FastAPI adds no CDN page of its own)."""
    api.mount(ASSETS_PATH, StaticFiles(directory=str(ASSETS)), name="docs-assets")

    @api.get(DOCS_PATH, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=api.openapi_url, title=f"{api.title}: REST API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png")
