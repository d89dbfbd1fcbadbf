"""Who may read GET /metrics once accounts exist: loopback without credentials, a remote
scraper with TUNEDECK_METRICS_TOKEN (which opens nothing else), an account's API token;
anyone else is refused. The token is never logged."""
from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.main import create_app
from tests.security.test_access import add_user, bearer
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings

SCRAPE_TOKEN = "scrape-token-0123456789abcdef"


@pytest.fixture
def scraped_app(tmp_path):
    settings = Settings(home=tmp_path / "home", broker_url=None,
                        metrics_token=SecretStr(SCRAPE_TOKEN))
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    app.state.user_token = add_user(app, "alice")
    yield app
    app.state.database.dispose()


def remote(app) -> TestClient:
    return TestClient(app, client=("203.0.113.7", 40000), raise_server_exceptions=False)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_loopback_scrapes_without_credentials(scraped_app, address):
    with TestClient(scraped_app, client=(address, 40000)) as client:
        response = client.get("/metrics")
        assert response.status_code == 200
        assert "tunedeck_jobs" in response.text
        # Loopback opens /metrics only: the API still wants an account.
        assert client.get("/api/jobs").status_code == 401


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token-0123456789",
                                           f"Basic {SCRAPE_TOKEN}", f"Bearer {SCRAPE_TOKEN}x"])
def test_a_remote_scrape_without_the_token_is_refused(scraped_app, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    with remote(scraped_app) as client:
        response = client.get("/metrics", headers=headers)
    assert response.status_code == 401
    assert "tunedeck_jobs" not in response.text


def test_the_scrape_token_reads_metrics_and_nothing_else(scraped_app, caplog):
    caplog.set_level(logging.DEBUG)
    with remote(scraped_app) as client:
        response = client.get("/metrics", headers=bearer(SCRAPE_TOKEN))
        assert response.status_code == 200 and "tunedeck_workers" in response.text
        assert client.get("/api/jobs", headers=bearer(SCRAPE_TOKEN)).status_code == 401
        assert client.get("/metrics/", headers=bearer(SCRAPE_TOKEN)).status_code == 401
    assert SCRAPE_TOKEN not in caplog.text
    assert SCRAPE_TOKEN not in repr(scraped_app.state.settings)


def test_an_accounts_api_token_also_reads_metrics(scraped_app):
    with remote(scraped_app) as client:
        response = client.get("/metrics", headers=bearer(scraped_app.state.user_token))
    assert response.status_code == 200 and "tunedeck_jobs" in response.text


def test_without_a_scrape_token_setting_a_remote_scrape_needs_an_account(tmp_path):
    settings = Settings(home=tmp_path / "home", broker_url=None)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    token = add_user(app, "alice")
    with remote(app) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer("")).status_code == 401
        assert client.get("/metrics", headers=bearer(token)).status_code == 200
    app.state.database.dispose()


def test_a_short_scrape_token_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.setenv("TUNEDECK_METRICS_TOKEN", "short")
    with pytest.raises(ValueError, match="metrics_token"):
        Settings()
