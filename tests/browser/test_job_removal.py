"""Acting on the jobs ticked in the Jobs table, in a real browser at 1440 x 900: Delete asks
first (a Confirm naming the job and its run folder), a running job is refused with its
reason, an archived job leaves the table and is shown with "Show archived"; "Compare
selected" opens the Compare tab on the ticked jobs; a tick stays on its job through the
table's refresh. Screenshots go to SCREENS, to be looked at."""
from __future__ import annotations

import pytest

from harness.servers import RunningServer
from tests.browser.conftest import LONG_JOB, SCREEN_VIEWPORT as VIEWPORT, SCREENS, signed_in_page
from tests.browser.tables import table_rows, tick, tick_box

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]

LONG = LONG_JOB
TABLE = "#jobs-table"


def _names(page) -> set[str]:
    return {row["name"] for row in table_rows(page, TABLE)}


def _shot(page, name: str) -> None:
    SCREENS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)


def _ticked(page, job_id: int) -> None:
    """Tick the job's box and see it ticked."""
    from playwright.sync_api import expect

    tick(page, TABLE, job_id)
    expect(tick_box(page, TABLE, job_id)).to_be_checked()


def _cancel(server: RunningServer, *job_ids: int) -> None:
    for job_id in job_ids:
        server.http.post(f"/api/jobs/{job_id}/cancel")


def test_delete_asks_first_refuses_a_running_job_and_archive_hides(
        browser, tunedeck_server: RunningServer):
    from playwright.sync_api import expect

    running = tunedeck_server.submit({**LONG, "name": "rm-running"})
    tunedeck_server.wait_for(running, {"running"}, timeout_seconds=240)
    # Queued behind the running one (one job at a time), so cancelling ends them at once.
    doomed = tunedeck_server.submit({**LONG, "name": "rm-doomed"})
    shelved = tunedeck_server.submit({**LONG, "name": "rm-shelved"})
    for job_id in (doomed, shelved):
        assert tunedeck_server.http.post(f"/api/jobs/{job_id}/cancel").status_code == 202
        tunedeck_server.wait_for(job_id, {"cancelled"}, timeout_seconds=60)
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        page.get_by_role("tab", name="Jobs", exact=True).click()
        table = page.locator(TABLE)
        expect(table).to_contain_text("rm-shelved")
        confirm = page.locator("#jobs-delete-confirm")
        message = page.locator("#jobs-action-message")

        page.locator("#jobs-delete").click()  # nothing ticked yet
        expect(message).to_contain_text("Tick one or more jobs in the table first.")
        expect(confirm).to_be_hidden()
        _ticked(page, doomed)
        page.locator("#jobs-delete").click()
        expect(confirm).to_have_text(f"Really delete job {doomed} and its run folder?")
        _shot(page, "jobs-delete-confirm")
        page.locator("#jobs-delete-cancel").click()
        expect(confirm).to_be_hidden()
        assert "rm-doomed" in _names(page)  # cancelled: nothing deleted
        page.locator("#jobs-delete").click()
        confirm.click()
        expect(message).to_contain_text(f"Job {doomed} deleted")
        expect(table).not_to_contain_text("rm-doomed")
        assert tunedeck_server.http.get(f"/api/jobs/{doomed}").status_code == 404

        _ticked(page, running)
        page.locator("#jobs-delete").click()
        confirm.click()
        expect(message).to_contain_text(f"job {running} is running; cancel it")
        assert tunedeck_server.job(running)["status"] == "running"
        expect(tick_box(page, TABLE, running)).not_to_be_checked()  # acted on: unticked

        _ticked(page, shelved)
        page.locator("#jobs-archive").click()
        expect(message).to_contain_text(f"Job {shelved} archived.")
        expect(table).not_to_contain_text("rm-shelved")
        page.locator("#jobs-show-archived input").check()
        expect(table).to_contain_text("rm-shelved")
        expect(table).not_to_contain_text("rm-running")
        expect(tick_box(page, TABLE, shelved)).not_to_be_checked()
        _shot(page, "jobs-archived")
    finally:
        page.context.close()
        _cancel(tunedeck_server, running)


def test_compare_selected_opens_the_compare_tab_on_the_ticked_jobs(
        browser, tunedeck_server: RunningServer):
    from playwright.sync_api import expect

    first = tunedeck_server.submit({**LONG, "name": "cmp-first"})
    second = tunedeck_server.submit({**LONG, "name": "cmp-second"})
    other = tunedeck_server.submit({**LONG, "name": "cmp-left-out"})
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        page.get_by_role("tab", name="Jobs", exact=True).click()
        expect(page.locator(TABLE)).to_contain_text("cmp-left-out")
        _ticked(page, first)
        page.locator("#jobs-compare").click()
        expect(page.locator("#jobs-action-message")).to_contain_text("tick at least 2 jobs")
        _ticked(page, second)
        expect(tick_box(page, TABLE, other)).not_to_be_checked()
        # A click on a tick box ticks; it does not open the job, as a click on its row does.
        expect(page.get_by_role("tab", name="Jobs", exact=True)).to_have_attribute(
            "aria-selected", "true")
        _shot(page, "jobs-ticked")
        page.locator("#jobs-compare").click()
        picker = page.locator("#compare-picker")
        expect(picker).to_be_visible()
        expect(picker).to_contain_text("cmp-first")
        expect(picker).to_contain_text("cmp-second")
        expect(picker).not_to_contain_text("cmp-left-out")
        compare_ids = page.locator("#compare-ids textarea, #compare-ids input").first
        expect(compare_ids).to_have_value(f"{first}, {second}")
        # The comparison itself is drawn: its figures table names both jobs.
        expect(page.locator("#compare-message")).not_to_contain_text("Pick two or more")
        expect(page.locator("#compare-summary")).to_contain_text(f"job {first}")
        expect(page.locator("#compare-summary")).to_contain_text(f"job {second}")
        _shot(page, "jobs-compare-selected")
    finally:
        page.context.close()
        _cancel(tunedeck_server, first, second, other)


def test_a_tick_stays_on_its_job_through_the_tables_refresh(
        browser, tunedeck_server: RunningServer):
    from playwright.sync_api import expect

    # Signed in before the job is submitted: a job's ranks starting on a 2-core machine
    # can hold the page's first draw past the sign-in's wait.
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    kept = tunedeck_server.submit({**LONG, "name": "tick-kept"})
    newer = None
    try:
        page.get_by_role("tab", name="Jobs", exact=True).click()
        expect(page.locator(TABLE)).to_contain_text("tick-kept")
        _ticked(page, kept)
        # Only the timer's refresh shows a job submitted now, on top: every row below moves.
        newer = tunedeck_server.submit({**LONG, "name": "tick-newer"})
        expect(page.locator(TABLE)).to_contain_text("tick-newer")
        assert table_rows(page, TABLE)[0]["name"] == "tick-newer"
        expect(tick_box(page, TABLE, kept)).to_be_checked()
        expect(tick_box(page, TABLE, newer)).not_to_be_checked()
        # Unticked by a second click, and that too survives the next refresh.
        tick(page, TABLE, kept)
        expect(tick_box(page, TABLE, kept)).not_to_be_checked()
        page.wait_for_timeout(5_000)  # two refreshes
        expect(tick_box(page, TABLE, kept)).not_to_be_checked()
    finally:
        page.context.close()
        _cancel(tunedeck_server, kept, *([newer] if newer else []))
