"""The app in-process under a temporary home, over SQLite or (where marked) a PostgreSQL
database of its own: PostgreSQL refuses inputs SQLite stores, so hostile input is tried on
both."""
from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.main import create_app
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def hostile_app(request, tmp_path) -> FastAPI:
    # Every location named explicitly, so a TUNEDECK_DATABASE_URL or TUNEDECK_BROKER_URL in
    # the developer's environment cannot point these tests at a real database or broker:
    # SQLite under the temporary home, or a fresh database (tests/conftest.py's postgres_url).
    database_url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    settings = Settings(home=tmp_path / "home", database_url=database_url, broker_url=None)
    if database_url is None:
        upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    yield app
    app.state.database.dispose()


@pytest.fixture
def hostile_client(hostile_app: FastAPI) -> TestClient:
    # A 500 comes back as a response (not a raised exception), so each test asserts on it.
    with TestClient(hostile_app, raise_server_exceptions=False) as client:
        yield client
