"""Every route while the database is unreachable: PostgreSQL of the test's own, stopped as a
crash would (`pg_ctl stop -m immediate`), and SQLite's file locked or not a database. No
route answers 500 or hangs: the database's routes answer 503 with Retry-After and a body
that says why, /healthz says so, /metrics counts it, and all of it recovers by itself."""
from __future__ import annotations

import re
import sqlite3
import time

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tunedeck.accounts import users as accounts
from tunedeck.db.outage import DATABASE_UNREACHABLE, RETRY_AFTER_SECONDS
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings

SPEC = {"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic", "max_steps": 2}
# Under the 30 s: a stopped PostgreSQL refuses at once; nothing waits on it.
LONGEST_ANSWER_SECONDS = 10


def add_user(app, name: str) -> str:
    with app.state.database.transaction() as session:
        accounts.create_user(session=session, name=name, password="a long password",
                             is_admin=True)
        return accounts.create_api_token(session=session, user_name=name, label="tests")


def every_route(app) -> list[tuple[str, str]]:
    """(method, path) of each API route in the OpenAPI schema, ids filled in with 1."""
    routes = []
    for path, operations in app.openapi()["paths"].items():
        for method in operations:
            routes.append((method.upper(), re.sub(r"\{[^}]+\}", "1", path)))
    return routes


def answers_during_outage(client: TestClient, app, headers: dict) -> dict[tuple[str, str], int]:
    statuses = {}
    for method, path in every_route(app):
        body = SPEC if method in ("POST", "PUT", "PATCH") else None
        started = time.monotonic()
        response = client.request(method, path, json=body, headers=headers)
        took = time.monotonic() - started
        statuses[(method, path)] = response.status_code
        if response.status_code == 503:
            # (A route that never asks the database, e.g. building a model for its LoRA
            # targets, takes what it takes.)
            assert took < LONGEST_ANSWER_SECONDS, f"{method} {path} took {took:.1f} s"
            assert response.headers["retry-after"] == str(RETRY_AFTER_SECONDS), (method, path)
            assert response.json()["detail"] == DATABASE_UNREACHABLE, (method, path, response.text)
    return statuses


def test_postgres_stopped_every_route_answers_503_and_all_recovers(tmp_path,
                                                                   private_postgres_server):
    settings = Settings(home=tmp_path / "home", database_url=private_postgres_server.url,
                        broker_url=None)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    token = add_user(app, "ops")
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        job_id = client.post("/api/jobs", json=SPEC, headers=headers).json()["id"]
        assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}
        # A second token, used once, then revoked while the database answers.
        with app.state.database.transaction() as session:
            revoked = accounts.create_api_token(session=session, user_name="ops", label="old")
        revoked_headers = {"Authorization": f"Bearer {revoked}"}
        assert client.get("/api/jobs", headers=revoked_headers).status_code == 200
        (old,) = [row for row in client.get("/api/tokens", headers=headers).json()
                  if row["label"] == "old"]
        assert client.delete(f"/api/tokens/{old['id']}", headers=headers).status_code == 204
        assert client.get("/api/jobs", headers=revoked_headers).status_code == 401

        private_postgres_server.stop_immediately()
        # A route that needs no database (the API's schema) tells who got past the access
        # check: the token checked a moment ago does; one revoked, or never seen, does not.
        assert client.get("/openapi.json", headers=headers).status_code == 200
        assert client.get("/openapi.json", headers=revoked_headers).status_code == 503
        # No credential at all needs no database to refuse, as ever.
        assert client.get("/openapi.json").status_code == 401
        statuses = answers_during_outage(client, app, headers)
        assert 500 not in statuses.values(), {route: status for route, status in statuses.items()
                                             if status == 500}
        # Every route that reads or writes jobs waits the outage out; none claims success.
        assert statuses[("GET", "/api/jobs")] == 503
        assert statuses[("POST", "/api/jobs")] == 503
        assert statuses[("GET", "/api/jobs/1/metrics")] == 503
        # A token this web never checked cannot be checked now: 503, not 401.
        stranger = client.get("/api/jobs", headers={"Authorization": "Bearer tdk_unknown"})
        assert stranger.status_code == 503
        health = client.get("/healthz")
        assert (health.status_code, health.headers["retry-after"]) == (503, "5")
        assert health.json()["database"] == "unreachable"
        scrape = client.get("/metrics", headers=headers).text
        assert "tunedeck_database_scrape_ok 0.0" in scrape
        refused = float(re.search(r"^tunedeck_database_unreachable_responses_total (\S+)$",
                                  scrape, re.MULTILINE)[1])
        assert refused >= sum(status == 503 for status in statuses.values())

        private_postgres_server.start()
        # The pool's dead connections are replaced as they are next used: no restart.
        deadline = time.monotonic() + 30
        while client.get("/healthz").status_code != 200:
            assert time.monotonic() < deadline, "the web did not find its database again"
            time.sleep(0.2)
        jobs = client.get("/api/jobs", headers=headers)
        assert jobs.status_code == 200 and [job["id"] for job in jobs.json()] == [job_id]
        assert client.post("/api/jobs", json=SPEC, headers=headers).status_code == 201


def test_sqlite_locked_or_unreadable_answers_503_not_500(tmp_path):
    settings = Settings(home=tmp_path / "home", broker_url=None)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    token = add_user(app, "ops")
    headers = {"Authorization": f"Bearer {token}"}
    database_file = settings.home_dir / "tunedeck.db"
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/api/jobs", headers=headers).status_code == 200
        # Locked: another process holds the write lock past the web's wait for it. Its
        # connections wait busy_timeout for the lock; this test shortens that wait.
        app.state.database.dispose()
        _short_busy_timeout(app)
        holder = sqlite3.connect(database_file, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            response = client.post("/api/jobs", json=SPEC, headers=headers)
            assert response.status_code == 503, response.text
            assert response.json()["detail"] == DATABASE_UNREACHABLE
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert client.post("/api/jobs", json=SPEC, headers=headers).status_code == 201

        # Unreadable: the file is no database any more (root reads any file whatever its
        # mode, so a garbled file stands for a file the web cannot read).
        app.state.database.dispose()
        saved = database_file.read_bytes()
        for suffix in ("-wal", "-shm"):
            (database_file.parent / (database_file.name + suffix)).unlink(missing_ok=True)
        database_file.write_bytes(b"not a database" * 100)
        try:
            statuses = answers_during_outage(client, app, headers)
            assert 500 not in statuses.values()
            assert statuses[("GET", "/api/jobs")] == 503
        finally:
            app.state.database.dispose()
            database_file.write_bytes(saved)
        assert client.get("/api/jobs", headers=headers).status_code == 200


def _short_busy_timeout(app) -> None:
    from sqlalchemy import event

    @event.listens_for(app.state.database.engine, "connect")
    def _wait_briefly(dbapi_connection, _record):
        dbapi_connection.execute("PRAGMA busy_timeout=500")
