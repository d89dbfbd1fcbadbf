"""The REST API in-process: a TestClient over a real SQLite database and the real
server-less broker (no worker runs, so jobs stay queued)."""
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tunedeck.db.engine import Database
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings


@pytest.fixture
def client(tmp_path):
    settings = Settings(home=tmp_path)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    with TestClient(app) as client:
        client.app_state = app.state  # for tests that set a job's state directly
        yield client


@pytest.fixture
def database(tmp_path) -> Database:
    """The UI handlers' tests run on SQLite only (the store itself is tested on both)."""
    url = f"sqlite:///{tmp_path / 'tunedeck.db'}"
    upgrade_database(url)
    database = Database(url)
    yield database
    database.dispose()
