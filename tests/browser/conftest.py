"""Browser-test fixtures: a real `tunedeck up` per test module (web + worker, its own
TUNEDECK_HOME), Debian's chromium for the session, and a fresh page on the app per test.

The server is module-scoped, not session-scoped: a module may assert on what only its own
tests submitted (e.g. "no job exists yet")."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.servers import RunningServer, add_account, running_tunedeck, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SERVER_START_SECONDS = 120
VIEWPORT = {"width": 1400, "height": 1000}
# The pages' screenshots: the issue's 1440 x 900, in one folder to look through.
SCREENS = Path("/tmp/tunedeck-screens")
SCREEN_VIEWPORT = {"width": 1440, "height": 900}
# A tiny LoRA job that runs until cancelled: a running job for a page to show.
LONG_JOB = {"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic", "method": "lora",
            "backend": "fsdp", "num_gpus": 2, "max_steps": 100_000, "micro_batch_size": 4,
            "seq_len": 64, "precision": "bf16", "learning_rate": 5e-3}
# The browser signs in as a plain user (not an admin): it sees its own jobs only.
USER, PASSWORD = "browser-user", "a browser's password"
EXPECT_SECONDS = 20


@pytest.fixture(scope="module")
def tunedeck_server(tmp_path_factory) -> RunningServer:
    """`tunedeck up` on a free port with one account, whose token the server's `http` client
    sends; everything of it is gone after the module's tests."""
    home = tmp_path_factory.mktemp("tunedeck-home")
    token = add_account(home, USER, PASSWORD)
    # Offline, as the tests are: a hub id in no cache fails at once, not after retries.
    with running_tunedeck(home, startup_seconds=SERVER_START_SECONDS, token=token,
                          extra_env={"HF_HUB_OFFLINE": "1"}) as running:
        # The web answers before its worker's first heartbeat; until then the form has no
        # host to judge a choice against (a busy machine once took over 30 s to register).
        wait_until(lambda: [worker for worker in running.http.get("/api/workers").json()["workers"]
                            if worker["state"] == "online"],
                   SERVER_START_SECONDS, "the worker's first heartbeat")
        yield running


@pytest.fixture(scope="module")
def server(tunedeck_server: RunningServer) -> str:
    return tunedeck_server.base_url


@pytest.fixture(scope="module")
def api(tunedeck_server: RunningServer):
    """The REST API with the browser user's token."""
    return tunedeck_server.http


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (scripts/ensure_chromium.sh installs it)")
    from playwright.sync_api import expect, sync_playwright

    # A page's first draw on a busy 2-core machine can take longer than the 5 s default.
    expect.set_options(timeout=EXPECT_SECONDS * 1000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def signed_in_page(browser, server: str, *, viewport: dict = VIEWPORT, path: str = "/"):
    """A new browser context's page, signed in through the sign-in form, on the UI at
    `path` (e.g. "/?job=3")."""
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(server)  # the UI sends a browser that has not signed in to the form
    page.locator("#username").fill(USER)
    page.locator("#password").fill(PASSWORD)
    page.locator("#sign-in").click()
    page.locator("#new-job-submit").wait_for()
    if path != "/":  # signing in lands on the UI's root
        page.goto(server.rstrip("/") + path)
        page.locator("#new-job-submit").wait_for(state="attached")
    return page


@pytest.fixture
def page(browser, server):
    page = signed_in_page(browser, server)
    yield page
    page.context.close()
