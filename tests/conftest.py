"""Shared fixtures: a migrated database per test (SQLite, or PostgreSQL where marked)."""
from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

# The seconds each folder took, printed after the run (tests/time_spent.py).
pytest_plugins = ["tests.time_spent"]

from tunedeck.db.engine import Database  # noqa: E402
from tunedeck.db.migrate import upgrade_database  # noqa: E402

POSTGRES_URL = os.environ.get("TUNEDECK_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TUNEDECK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session", autouse=True)
def allowed_roots_cover_pytest_tmp(tmp_path_factory) -> None:
    """Tests write their datasets and model folders under pytest's temporary folder: allow
    that folder (TUNEDECK_ALLOWED_ROOTS, inherited by the web and worker processes the
    end-to-end tests start). Set here, not taken from the developer's environment."""
    os.environ["TUNEDECK_ALLOWED_ROOTS"] = str(tmp_path_factory.getbasetemp().resolve())


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'tunedeck.db'}"
    upgrade_database(url)
    return url


@pytest.fixture
def postgres_url() -> str:
    """A fresh PostgreSQL database of its own, dropped afterwards (tests never share one)."""
    from sqlalchemy import create_engine, text

    name = f"tunedeck_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
    upgrade_database(url)
    yield url
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request) -> Database:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    database = Database(url)
    yield database
    database.dispose()


@pytest.fixture
def private_postgres_server(tmp_path):
    """A PostgreSQL cluster of the test's own, which it may stop as a crash would and start
    again (harness/private_postgres.py); skipped where this machine cannot run one."""
    from harness.private_postgres import private_postgres_or_skip

    with private_postgres_or_skip(tmp_path / "postgres") as server:
        yield server
