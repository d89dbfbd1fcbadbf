"""Issue 32's page side, in a real browser: `tunedeck up` on a PostgreSQL of the test's own,
stopped as a crash would (`pg_ctl stop -m immediate`) for 25 s while the Jobs tab refreshes.
The page shows one warning strip, "the database is unreachable; retrying", and no error
toast; the table keeps what it showed. Once PostgreSQL is back the strip goes by itself and
the table refreshes again (a job submitted after the outage shows up).

The screenshot goes to SCREENS/database-outage.png, to be looked at."""
from __future__ import annotations

import time

import pytest

from app.ui.database_banner import BANNER_ID, CHECK_SECONDS
from harness.private_postgres import private_postgres_or_skip
from harness.servers import add_account, fake_trainer_environment, running_tunedeck
from tests.browser.conftest import (LONG_JOB, PASSWORD, SCREEN_VIEWPORT, SCREENS,
                                    SERVER_START_SECONDS, USER, signed_in_page)
from tests.browser.tables import job_row
from tunedeck.db.outage import DATABASE_UNREACHABLE

pytestmark = [pytest.mark.browser]

TABLE = "#jobs-table"
BANNER = f"#{BANNER_ID}"
# Gradio's toasts (an error raised by a handler, a connection lost) and the "Error" a
# component's status shows for an event that raised.
TOAST = '[data-testid="toast-body"]'
OUTAGE_SECONDS = 25
# The strip shows on the first check after the stop (a stopped PostgreSQL refuses at once)
# and hides on the first after the start; a slow tick on a busy 2-core machine aside.
BANNER_SECONDS = CHECK_SECONDS + 8


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    with private_postgres_or_skip(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture(scope="module")
def outage_server(tmp_path_factory, postgres):
    """`tunedeck up` (web and worker) on `postgres`; its jobs run the fake trainer (step lines,
    no model)."""
    home = tmp_path_factory.mktemp("tunedeck-home")
    database = {"TUNEDECK_DATABASE_URL": postgres.url}
    token = add_account(home, USER, PASSWORD, extra_env=database)
    with running_tunedeck(home, startup_seconds=SERVER_START_SECONDS, token=token,
                          extra_env={**database, "HF_HUB_OFFLINE": "1",
                                     **fake_trainer_environment()}) as running:
        yield running


def _no_error_shown(page) -> None:
    from playwright.sync_api import expect

    expect(page.locator(TOAST)).to_have_count(0, timeout=1)
    expect(page.get_by_text("Error", exact=True)).to_have_count(0, timeout=1)


def test_a_database_outage_shows_one_banner_and_the_page_recovers_by_itself(
        browser, outage_server, postgres):
    from playwright.sync_api import expect

    job_id = outage_server.submit({**LONG_JOB, "name": "through-the-outage"})
    submitted = [job_id]
    page = signed_in_page(browser, outage_server.base_url, viewport=SCREEN_VIEWPORT)
    try:
        page.get_by_role("tab", name="Jobs", exact=True).click()
        expect(job_row(page, TABLE, job_id)).to_be_visible()
        expect(page.locator(BANNER)).to_be_hidden()

        postgres.stop_immediately()
        stopped_at = time.monotonic()
        expect(page.locator(BANNER)).to_be_visible(timeout=BANNER_SECONDS * 1000)
        expect(page.locator(BANNER)).to_contain_text(DATABASE_UNREACHABLE, timeout=1)
        # Through the outage: the strip stays, no toast or error status comes, and the
        # table keeps the job it showed (each tick changed nothing).
        while time.monotonic() - stopped_at < OUTAGE_SECONDS:
            _no_error_shown(page)
            expect(page.locator(BANNER)).to_be_visible(timeout=1)
            time.sleep(1)
        expect(job_row(page, TABLE, job_id)).to_be_visible(timeout=1)
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "database-outage.png"))

        postgres.start()
        expect(page.locator(BANNER)).to_be_hidden(timeout=BANNER_SECONDS * 1000)
        # The Jobs tab's timer went on: a job submitted now shows without a reload.
        after = outage_server.submit({**LONG_JOB, "name": "after-the-outage"})
        submitted.append(after)
        expect(job_row(page, TABLE, after)).to_be_visible()
        expect(job_row(page, TABLE, job_id)).to_be_visible()
        _no_error_shown(page)
        page.screenshot(path=str(SCREENS / "database-outage-recovered.png"))
    finally:
        page.context.close()
        if postgres.answers():
            for submitted_id in submitted:
                outage_server.http.post(f"/api/jobs/{submitted_id}/cancel")
