"""http-api.md: every route of the web app's OpenAPI document (built against a throw-away
TUNEDECK_HOME with a migrated SQLite database), with its parameters, body and status codes,
then the request bodies the routes name."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from .markdown import GENERATED, anchor, code, paragraphs, table
from .schema_fields import schema_constraints, schema_default, schema_type


def build_openapi() -> dict[str, Any]:
    """The OpenAPI document of a web app on a fresh, migrated SQLite in a temporary home."""
    from app.main import create_app
    from tunedeck.db.migrate import upgrade_database
    from tunedeck.settings import Settings

    with tempfile.TemporaryDirectory(prefix="tunedeck-reference-") as home:
        # Explicit values: the caller's TUNEDECK_* environment must not change the page.
        settings = Settings(home=Path(home), database_url=f"sqlite:///{home}/tunedeck.db",
                            broker_url=None, host="127.0.0.1")
        upgrade_database(settings.resolved_database_url)
        # The Gradio UI is mounted as a sub-application, which adds nothing to the document.
        app = create_app(settings, with_ui=False)
        try:
            document = app.openapi()
        finally:
            app.state.database.dispose()
    text = json.dumps(document, sort_keys=True)
    if home in text:
        raise SystemExit("write_reference: the OpenAPI document names the temporary home")
    return document


def _parameter_rows(operation: dict[str, Any], link) -> list[list[str]]:
    rows = []
    for parameter in operation.get("parameters", []):
        schema = parameter.get("schema", {})
        rows.append([code(parameter["name"]), parameter["in"], schema_type(schema, link),
                     schema_default(schema, parameter.get("required", False)),
                     schema_constraints(schema), paragraphs(parameter.get("description"))])
    return rows


def _body(operation: dict[str, Any], link) -> str:
    body = operation.get("requestBody")
    if not body:
        return ""
    kinds = []
    for media, content in sorted(body.get("content", {}).items()):
        kinds.append(f"{code(media)}: {schema_type(content.get('schema', {}), link)}")
    return "; ".join(kinds) + ("" if body.get("required") else " (optional)")


def render() -> str:
    from app.auth.middleware import PUBLIC_PATHS
    from app.auth.vouched_credentials import OUTAGE_GRACE_SECONDS
    from tunedeck.db.outage import DATABASE_UNREACHABLE, RETRY_AFTER_SECONDS

    document = build_openapi()
    schemas = document.get("components", {}).get("schemas", {})
    spec_models = {"JobSpec", "LoraSettings", "Zero2Settings", "FsdpSettings", "ColumnMapping"}

    def link(name: str) -> str:
        if name in spec_models:
            return f"[{name}](job-spec.md#{anchor(name)})"
        return f"[{name}](#{anchor(name)})"

    operations = []
    for path in sorted(document.get("paths", {})):
        for method in sorted(document["paths"][path]):
            operations.append((path, method.upper(), document["paths"][path][method]))

    lines = [GENERATED, "", "# HTTP API reference", "",
             f"Every route of {document['info']['title']}'s REST API, from the OpenAPI document "
             "the web serves at `/openapi.json`. Bodies and answers are JSON unless a route says "
             "otherwise. The job spec's fields are in [job-spec.md](job-spec.md); the "
             "[user guide](../user-guide.md) and [deploying](../deploy.md) show the routes in use.",
             "", "## Access", "",
             "With no account in the database (open access, loopback only) every request acts as "
             "an admin. Once an account exists, every route but "
             + ", ".join(code(path) for path in sorted(PUBLIC_PATHS))
             + " wants `Authorization: Bearer <token>` (a token from `tunedeck token create` or "
             "`POST /api/tokens`) or the browser's sign-in cookie, and answers 401 without one. "
             "Beyond the codes each route lists below: another user's job (or preflight) answers "
             "404 as a missing one does, an admin-only route answers 403 to a user, and a request "
             "the job's state refuses answers 409 with the reason in `detail`. A 422's `detail` "
             "is a list of problems, each naming its field in `loc`.", "",
             "While the web cannot reach its database, every route that needs it (and every "
             "request whose credentials this web has not checked in the last "
             f"{OUTAGE_GRACE_SECONDS / 60:g} minutes) answers 503 with `Retry-After: "
             f"{RETRY_AFTER_SECONDS}` and `{{\"detail\": \"{DATABASE_UNREACHABLE}\"}}`, "
             "never 500: ask again later. `/healthz` answers 503 too, and `/metrics` counts "
             "these answers in `tunedeck_database_unreachable_responses_total`.", "",
             "## Routes", ""]
    lines += table(["method", "path", "summary"],
                   ([method, f"[{code(path)}](#{anchor(method + ' ' + path)})",
                     operation.get("summary", "")] for path, method, operation in operations))
    for path, method, operation in operations:
        lines += ["", f"### {method} {path}", ""]
        description = paragraphs(operation.get("description"))
        if description:
            lines += [description, ""]
        parameters = _parameter_rows(operation, link)
        if parameters:
            lines += table(["parameter", "in", "type", "default", "constraint", "description"],
                           parameters)
            lines += [""]
        body = _body(operation, link)
        if body:
            lines += [f"Body: {body}.", ""]
        responses = operation.get("responses", {})
        lines += table(["status", "meaning"],
                       ([code(status), responses[status].get("description", "")]
                        for status in sorted(responses)))
    referenced = sorted(name for name in schemas if name not in spec_models)
    if referenced:
        lines += ["", "## Bodies", "",
                  "The request bodies the routes above name (the job spec's own sections are in "
                  "[job-spec.md](job-spec.md)).", ""]
        for name in referenced:
            schema = schemas[name]
            lines += [f"### {name}", ""]
            if schema.get("description"):
                lines += [paragraphs(schema["description"]), ""]
            required = set(schema.get("required", []))
            rows = []
            for field in sorted(schema.get("properties", {})):
                prop = schema["properties"][field]
                rows.append([code(field), schema_type(prop, link),
                             schema_default(prop, field in required), schema_constraints(prop),
                             paragraphs(prop.get("description"))])
            lines += table(["field", "type", "default", "constraint", "description"], rows)
            lines += [""]
    return "\n".join(lines).rstrip("\n") + "\n"
