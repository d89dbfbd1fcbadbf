"""The API's credentials in its OpenAPI schema: an `Authorization: Bearer` API token, or the
browser's session cookie, on every route but the public ones. The access middleware checks
them (routes declare no per-route dependency), so the schema says it here, once, and
`/docs` gets its "Authorize" button."""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.auth.middleware import PUBLIC_PATHS, SESSION_COOKIE

BEARER, COOKIE = "apiToken", "sessionCookie"
SCHEMES = {
    BEARER: {"type": "http", "scheme": "bearer",
             "description": "an API token: `tunedeck token create USER`, or POST /api/tokens"},
    COOKIE: {"type": "apiKey", "in": "cookie", "name": SESSION_COOKIE,
             "description": "the browser's session, set by signing in at /login"},
}


def declare_credentials(api: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            schema = get_openapi(title=api.title, version=api.version, routes=api.routes,
                                 description=api.description)
            schema.setdefault("components", {})["securitySchemes"] = SCHEMES
            for path, operations in schema.get("paths", {}).items():
                if path in PUBLIC_PATHS:
                    continue
                for operation in operations.values():
                    operation["security"] = [{BEARER: []}, {COOKIE: []}]
            api.openapi_schema = schema
        return api.openapi_schema

    api.openapi = openapi
