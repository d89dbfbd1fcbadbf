"""Deleting and archiving from the Jobs tab in a real browser at 1440 x 900: Delete asks
first (a Confirm naming the job and its run folder), a running job is refused with its
reason, an archived job leaves the table and is shown with "Show archived". Screenshots go
to SCREENS, to be looked at."""
from __future__ import annotations

import re

import pytest

from harness.servers import RunningServer
from tests.browser.conftest import LONG_JOB, SCREEN_VIEWPORT as VIEWPORT, SCREENS, signed_in_page
from tests.browser.tables import table_rows

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]

LONG = LONG_JOB


def _names(page) -> set[str]:
    return {row["name"] for row in table_rows(page, "#jobs-table")}


def _shot(page, name: str) -> None:
    SCREENS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)


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
        table = page.locator("#jobs-table")
        expect(table).to_contain_text("rm-shelved")
        ids = page.locator("#jobs-action-ids textarea, #jobs-action-ids input").first
        confirm = page.locator("#jobs-delete-confirm")
        message = page.locator("#jobs-action-message")

        ids.fill(str(doomed))
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

        ids.fill(str(running))
        page.locator("#jobs-delete").click()
        confirm.click()
        expect(message).to_contain_text(f"job {running} is running; cancel it")
        assert tunedeck_server.job(running)["status"] == "running"

        ids.fill(str(shelved))
        page.locator("#jobs-archive").click()
        expect(message).to_contain_text(f"Job {shelved} archived.")
        expect(table).not_to_contain_text("rm-shelved")
        page.locator("#jobs-show-archived input").check()
        expect(table).to_contain_text("rm-shelved")
        expect(table).not_to_contain_text("rm-running")
        _shot(page, "jobs-archived")
    finally:
        page.context.close()
        tunedeck_server.http.post(f"/api/jobs/{running}/cancel")


def test_compare_selected_opens_the_compare_tab_with_those_jobs_picked(
        browser, tunedeck_server: RunningServer):
    from playwright.sync_api import expect

    first = tunedeck_server.submit({**LONG, "name": "cmp-first"})
    second = tunedeck_server.submit({**LONG, "name": "cmp-second"})
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        page.get_by_role("tab", name="Jobs", exact=True).click()
        expect(page.locator("#jobs-table")).to_contain_text("cmp-second")
        ids = page.locator("#jobs-action-ids textarea, #jobs-action-ids input").first
        ids.fill(str(first))
        page.locator("#jobs-compare").click()
        expect(page.locator("#jobs-action-message")).to_contain_text("at least 2 job ids")
        # Picked from the list, not typed: the picks become the ids.
        ids.fill("")
        for job_id in (first, second):
            page.locator("#jobs-select input").click()
            page.get_by_role("option", name=re.compile(rf"^{job_id} · cmp-")).click()
        expect(ids).to_have_value(f"{first}, {second}")
        page.locator("#jobs-compare").click()
        picker = page.locator("#compare-picker")
        expect(picker).to_be_visible()
        expect(picker).to_contain_text("cmp-first")
        expect(picker).to_contain_text("cmp-second")
        compare_ids = page.locator("#compare-ids textarea, #compare-ids input").first
        expect(compare_ids).to_have_value(f"{first}, {second}")
        # The comparison itself is drawn: its figures table names both jobs.
        expect(page.locator("#compare-message")).not_to_contain_text("Pick two or more")
        expect(page.locator("#compare-summary")).to_contain_text(f"job {first}")
        _shot(page, "jobs-compare-selected")
    finally:
        page.context.close()
        for job_id in (first, second):
            tunedeck_server.http.post(f"/api/jobs/{job_id}/cancel")
