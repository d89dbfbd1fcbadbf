"""Browser-test fixtures: a real `tunedeck up` per test module (web + worker, its own
TUNEDECK_HOME), Debian's chromium for the session, and a fresh page on the app per test.

The server is module-scoped, not session-scoped: a module may assert on what only its own
tests submitted (e.g. "no job exists yet")."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers import RunningServer, running_tunedeck

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SERVER_START_SECONDS = 120
VIEWPORT = {"width": 1400, "height": 1000}


@pytest.fixture(scope="module")
def tunedeck_server(tmp_path_factory) -> RunningServer:
    """`tunedeck up` on a free port; everything of it is gone after the module's tests."""
    home = tmp_path_factory.mktemp("tunedeck-home")
    with running_tunedeck(home, startup_seconds=SERVER_START_SECONDS) as running:
        yield running


@pytest.fixture(scope="module")
def server(tunedeck_server: RunningServer) -> str:
    return tunedeck_server.base_url


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (scripts/ensure_chromium.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(server)
    page.locator("#new-job-submit").wait_for()
    yield page
    context.close()
