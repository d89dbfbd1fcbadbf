"""Issue 29 in a real browser, from a fresh session on a fresh server: the Job tab opens
empty without an error, Gradio's "Use via API" is replaced by a link to the REST API's docs
(which draw offline), and a tab that is not shown sends no refresh requests.

Screenshots go to SCREENS, to be looked at."""
from __future__ import annotations

import math
import re
import time

import pytest

from app.ui.database_banner import CHECK_SECONDS
from app.ui.job_page.job_handlers import NO_JOB_HEADLINE
from harness.servers import RunningServer
from tests.browser.conftest import SCREEN_VIEWPORT, SCREENS, signed_in_page

pytestmark = [pytest.mark.browser]


@pytest.fixture
def fresh_page(browser, tunedeck_server: RunningServer):
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=SCREEN_VIEWPORT)
    yield page
    page.context.close()


def _shot(page, name: str) -> None:
    SCREENS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)


def _server_log(server: RunningServer) -> str:
    return "".join(log.read_text(errors="replace") for log in sorted(server.home.glob("*.log")))


def test_the_job_tab_of_a_fresh_session_says_how_to_open_a_job_without_an_error(
        fresh_page, tunedeck_server):
    from playwright.sync_api import expect

    log_before = len(_server_log(tunedeck_server))
    fresh_page.get_by_role("tab", name="Job", exact=True).click()
    expect(fresh_page.locator("#job-status")).to_contain_text(NO_JOB_HEADLINE)
    time.sleep(3)  # long enough for an error toast, or a timer's tick, to arrive
    _shot(fresh_page, "first-contact-empty-job-tab")
    expect(fresh_page.get_by_text(re.compile("less than minimum"))).to_have_count(0)
    expect(fresh_page.locator(".toast-body")).to_have_count(0)
    assert fresh_page.locator("#job-id input").input_value() in ("", ), \
        "an empty Job tab's id box is empty, not 0"
    # Back on another tab, no error followed the user there.
    fresh_page.get_by_role("tab", name="Jobs", exact=True).click()
    time.sleep(1)
    expect(fresh_page.locator(".toast-body")).to_have_count(0)
    assert "Traceback" not in _server_log(tunedeck_server)[log_before:]


def test_the_footer_has_no_use_via_api_and_the_rest_api_docs_draw_offline(
        fresh_page, tunedeck_server):
    from playwright.sync_api import expect

    expect(fresh_page.locator("#new-job-submit")).to_be_visible()
    expect(fresh_page.get_by_text("Use via API")).to_have_count(0)
    # Nor a separating dot left standing before Settings.
    assert fresh_page.locator("footer").inner_text().strip().startswith("Settings")
    link = fresh_page.locator("#rest-api-docs")
    expect(link).to_have_attribute("href", "/docs")
    # Everything the docs page loads comes from this server: none of it from a CDN.
    requested: list[str] = []
    docs = fresh_page.context.new_page()
    docs.on("request", lambda request: requested.append(request.url))
    docs.goto(tunedeck_server.base_url.rstrip("/") + "/docs")
    expect(docs.get_by_text("/api/jobs").first).to_be_visible()
    docs.screenshot(path=str(SCREENS / "first-contact-rest-api-docs.png"))
    foreign = [url for url in requested if not url.startswith(tunedeck_server.base_url.rstrip("/"))
               and not url.startswith("data:")]
    assert not foreign, foreign
    docs.close()


def _events_sent(page, seconds: float) -> int:
    """How many Gradio events (each a POST to its queue's join) the page sends in `seconds`,
    from the page's own resource timings (Playwright's request events miss Gradio's)."""
    page.evaluate("() => performance.clearResourceTimings()")
    time.sleep(seconds)
    return page.evaluate("""() => performance.getEntriesByType('resource')
        .filter(entry => entry.name.includes('/queue/join')).length""")


def test_the_jobs_and_cluster_tables_refresh_only_while_their_tab_is_shown(fresh_page):
    from playwright.sync_api import expect

    expect(fresh_page.locator("#new-job-submit")).to_be_visible()
    time.sleep(1)  # the page's load events are done
    # The database banner's check (app/ui/database_banner.py) is all an idle page sends;
    # a shown table's refresh comes on top of it.
    window = 8
    banner_checks = math.ceil(window / CHECK_SECONDS) + 1
    idle = _events_sent(fresh_page, window)
    assert idle <= banner_checks, "a page left on the New job tab sends only the banner's check"
    for name in ("Jobs", "Cluster"):
        fresh_page.get_by_role("tab", name=name, exact=True).click()
        assert _events_sent(fresh_page, window) >= idle + 2, f"the {name} tab refreshes while shown"
    fresh_page.get_by_role("tab", name="Compare", exact=True).click()
    time.sleep(1)
    fresh_page.get_by_role("tab", name="New job", exact=True).click()
    time.sleep(1)  # a tick already on its way
    assert _events_sent(fresh_page, window) <= banner_checks, "the tabs' timers stopped when hidden"


def test_submit_opens_the_job_at_its_status_and_compare_backends_opens_compare(
        fresh_page, tunedeck_server):
    from playwright.sync_api import expect

    submit = fresh_page.locator("#new-job-submit")
    submit.scroll_into_view_if_needed()  # the bottom of a long form
    assert fresh_page.evaluate("() => window.scrollY") > 300
    submit.click()
    expect(fresh_page.get_by_role("tab", name="Job", exact=True)).to_have_attribute(
        "aria-selected", "true")
    status = fresh_page.locator("#job-status")
    expect(status).to_contain_text("Job ")
    job_id = int(fresh_page.locator("#job-id input").input_value())
    expect(status).to_be_in_viewport()
    assert fresh_page.evaluate("() => window.scrollY") < 50
    # Named for what it trains, told apart by its id.
    assert tunedeck_server.job(job_id)["name"] == f"tiny-llama-lora-zero2-{job_id}"
    _shot(fresh_page, "first-contact-submitted")
    fresh_page.locator("#job-compare-backends").click()
    expect(fresh_page.get_by_role("tab", name="Compare", exact=True)).to_have_attribute(
        "aria-selected", "true")
    ids = fresh_page.locator("#compare-ids textarea, #compare-ids input").first
    expect(ids).to_have_value(re.compile(r"^\d+, \d+$"))
    compared = [int(part) for part in ids.input_value().split(",")]
    # The comparison itself is drawn, not the hint on what to pick.
    expect(fresh_page.locator("#compare-message")).to_contain_text(str(compared[0]))
    expect(fresh_page.locator("#compare-message")).not_to_contain_text("Pick two or more")
    _shot(fresh_page, "first-contact-compare-backends")
    for each in (job_id, *compared):
        tunedeck_server.http.post(f"/api/jobs/{each}/cancel")
