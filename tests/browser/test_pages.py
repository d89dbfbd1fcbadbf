"""Issue 16 in a real browser at 1440 x 900: a job's own address (reload, back), the Jobs
table (headers on one line, filters, why a queued job waits), the New job form (defaults
that train, errors beside their field in the error colour, the preview kept), the Job page
(what ran, one memory chart, the log at its newest line with a link to all of it, the
cancel note gone once the job stopped, why Resume is greyed out) and the Cluster tab on a
host without GPUs.

One long job runs (and is cancelled by the tests) while a second waits behind it: the
worker runs one job at a time. Screenshots go to SCREENS, one a page, to be looked at.
"""
from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from harness.servers import RunningServer
from tests.browser.conftest import (LONG_JOB, SCREEN_VIEWPORT as VIEWPORT, SCREENS, USER,
                                    signed_in_page)
from tests.browser.tables import table_rows
from tests.browser.chart_reading import legend_labels, line_colours, line_points

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]

LONG = LONG_JOB
SHORT = {**LONG, "max_steps": 3}
WAIT_SECONDS = 240


@pytest.fixture(scope="module")
def jobs(tunedeck_server: RunningServer) -> tuple[int, int]:
    """(the long job, running once this returns; the short one queued behind it)."""
    long_job = tunedeck_server.submit({**LONG, "name": "pages-long"})
    short_job = tunedeck_server.submit({**SHORT, "name": "pages-short"})
    tunedeck_server.wait_for(long_job, {"running"}, timeout_seconds=WAIT_SECONDS)
    return long_job, short_job


@contextmanager
def _opened(browser, server: RunningServer, path: str = "/") -> Iterator:
    """A signed-in page at 1440 x 900 on `path`, closed after."""
    page = signed_in_page(browser, server.base_url, viewport=VIEWPORT, path=path)
    try:
        yield page
    finally:
        page.context.close()


@pytest.fixture
def wide_page(browser, tunedeck_server):
    with _opened(browser, tunedeck_server) as page:
        yield page


def _expect():
    from playwright.sync_api import expect

    return expect


def _shot(page, name: str) -> None:
    SCREENS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()


def test_the_form_defaults_train_and_a_bad_value_is_marked_beside_its_field(wide_page):
    expect, page = _expect(), wide_page
    rate = page.locator("#new-job-learning-rate input")
    assert float(rate.input_value()) == 5e-3  # the built-in model learns visibly at it
    assert page.locator("#new-job-epochs input, #new-job-epochs textarea").first.input_value() == ""
    config = page.locator("#new-job-config")
    expect(config).to_contain_text('"stage": 2')
    rate.fill("5")
    rate.press("Tab")
    field = page.locator("#new-job-learning-rate")
    expect(field).to_have_class(re.compile(r"\bfield-error\b"))
    expect(field).to_contain_text("less than or equal to 1")
    colour = field.locator(".info-text").evaluate("node => getComputedStyle(node).color")
    black = page.locator("#new-job-model .info-text, #new-job-model [data-testid=block-info]") \
        .first.evaluate("node => getComputedStyle(node).color")
    assert colour != black and re.match(r"rgb\((\d+), (\d+), (\d+)\)", colour), (colour, black)
    red, green, blue = map(int, re.findall(r"\d+", colour)[:3])
    assert red > 150 and green < 100 and blue < 100, colour  # the theme's error red
    expect(page.locator("#new-job-errors")).to_contain_text("Learning rate (learning_rate)")
    expect(config).to_contain_text('"stage": 2')  # the last valid form's config stays
    _shot(page, "new-job-bad-value")
    page.locator("#new-job-submit").click()
    result = page.locator("#new-job-result")
    expect(result).to_contain_text("Not submitted: fix what is marked in red")
    expect(result).not_to_contain_text("less than or equal")  # said once, beside the field
    rate.fill("0.005")
    rate.press("Tab")
    expect(field).not_to_have_class(re.compile(r"\bfield-error\b"))
    # A real model's folder takes the real-model default, unless the user typed their own.
    page.locator("#new-job-model textarea, #new-job-model input").first.fill("/models/Qwen2.5")
    expect(rate).to_have_value("0.0002")


def test_the_gpu_speed_options_show_in_the_preview_and_liger_is_refused_on_a_cpu_cluster(
        wide_page, jobs):
    """The form's GPU speed section: a ticked fused optimizer is in the DeepSpeed JSON the
    preview shows, and with only this CPU worker registered (`jobs` started it), Liger is
    marked beside its field before anything is submitted."""
    expect, page = _expect(), wide_page
    section = page.locator("#new-job-speed-options")
    section.get_by_text("GPU speed", exact=True).click()
    page.locator("#new-job-fused-optimizer input").check()
    config = page.locator("#new-job-config")
    expect(config).to_contain_text('"fused": true')
    page.locator("#new-job-kernels input").click()
    page.get_by_role("option", name="liger", exact=True).click()
    field = page.locator("#new-job-kernels")
    expect(field).to_have_class(re.compile(r"\bfield-error\b"))
    expect(field).to_contain_text("needs a CUDA GPU")
    expect(page.locator("#new-job-errors")).to_contain_text("Kernels (kernels)")
    section.scroll_into_view_if_needed()
    _shot(page, "new-job-speed")


def test_the_jobs_table_fits_says_why_a_job_waits_and_filters(wide_page, jobs):
    expect, page = _expect(), wide_page
    long_job, short_job = jobs
    _tab(page, "Jobs")
    table = page.locator("#jobs-table")
    expect(table).to_contain_text("pages-short")
    rows = {row["name"]: row for row in table_rows(page, "#jobs-table")}
    assert rows["pages-short"]["status"] == "queued", rows
    assert rows["pages-short"]["reason"] == (
        f"waiting: the worker runs one job at a time and job {long_job} is running"), rows
    assert rows["pages-long"]["method · backend"] == "lora · fsdp"
    # Every header on one line: none is broken inside a word ("metho/d").
    for header in table.locator("[data-testid^='header-']").all():
        name = header.get_attribute("title") or ""
        lines = header.evaluate(
            "node => { const range = document.createRange(); range.selectNodeContents(node);"
            " return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size; }")
        assert lines <= 2, (name, lines)  # its text, and its menu button on the same row
        height = header.evaluate("node => node.getBoundingClientRect().height")
        assert height < 60, (name, height)
        clipped = header.evaluate(
            "node => [node, ...node.querySelectorAll('*')].some("
            "el => el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0)")
        assert not clipped, name  # nor cut short ("tokens/")
    # A plain user sees only their own jobs: no owner column.
    assert "owner" not in [header.get_attribute("title") or header.inner_text().strip()
                           for header in table.locator("[data-testid^='header-']").all()]
    assert_cells_break_only_between_words(table)
    # No row is taller than four lines of text (Gradio 6 draws rows as divs, not <tr>).
    rows = table.locator("[role=row]").all()
    assert len(rows) >= 3  # the header and the two jobs
    for row in rows:
        assert row.evaluate("node => node.getBoundingClientRect().height") < 110, row.inner_text()
    _shot(page, "jobs")
    page.locator("#jobs-status input").click()
    page.get_by_role("option", name="queued", exact=True).click()
    expect(table).not_to_contain_text("pages-long")
    expect(table).to_contain_text("pages-short")


def test_a_job_has_its_own_address_kept_on_reload_and_back(browser, tunedeck_server, jobs):
    expect = _expect()
    long_job, short_job = jobs
    with _opened(browser, tunedeck_server, f"/?job={long_job}") as page:
        expect(page.locator("#job-status")).to_contain_text(f"Job {long_job}")
        expect(page.locator("#job-what-ran")).to_contain_text(
            f"builtin:tiny-llama on builtin:arithmetic · lora on fsdp · 2 GPU(s) · "
            f"submitted by {USER} at")
        _tab(page, "Jobs")
        page.locator("#jobs-table [data-testid^='cell-']").filter(has_text="pages-short") \
            .first.click()
        page.wait_for_url(f"**/?job={short_job}")
        expect(page.locator("#job-status")).to_contain_text(f"Job {short_job}")
        page.reload()
        expect(page.locator("#job-status")).to_contain_text(f"Job {short_job}")
        page.go_back()
        page.wait_for_url(f"**/?job={long_job}")
        expect(page.locator("#job-status")).to_contain_text(f"Job {long_job}")
        # The id cell is a link to the same address.
        _tab(page, "Jobs")
        link = page.locator(f"#jobs-table [data-testid^='cell-'] a[href='?job={short_job}']")
        expect(link).to_be_visible()


def test_the_job_page_keeps_the_log_at_its_newest_line_and_one_memory_chart(
        browser, tunedeck_server, jobs):
    expect = _expect()
    long_job, _short = jobs
    with _opened(browser, tunedeck_server, f"/?job={long_job}") as page:
        expect(page.locator("#job-status")).to_contain_text(re.compile(r"step [1-9]"),
                                                            timeout=WAIT_SECONDS * 1000)
        box = page.locator("#job-log .job-log-box")
        deadline = time.monotonic() + 60
        while box.evaluate("node => node.scrollHeight <= node.clientHeight") \
                and time.monotonic() < deadline:
            time.sleep(1)  # until the log overflows its box
        assert box.evaluate("node => node.scrollHeight > node.clientHeight")
        # Scrolled to its newest line: a reversed column's scrollTop is 0 at its end.
        assert abs(box.evaluate("node => node.scrollTop")) <= 2
        last_line = box.inner_text().strip().splitlines()[-1]
        visible = box.evaluate("node => node.getBoundingClientRect().bottom")
        assert last_line and visible > 0
        href = page.locator("#job-download-log, #job-log-download").first.get_attribute("href")
        assert href == f"/api/jobs/{long_job}/logs/full"
        full = tunedeck_server.http.get(href)
        assert full.status_code == 200 and "step" in full.text
        assert len(full.text.splitlines()) >= len(box.inner_text().splitlines()) - 1
        expect(page.locator("#job-memory-plot")).to_be_visible()
        assert page.locator("#job-gpu-memory-plot").count() == 0
        deadline = time.monotonic() + 60
        while legend_labels(page, "#job-memory-plot") != ["rank 0", "rank 1"] \
                and time.monotonic() < deadline:
            time.sleep(1)
        assert legend_labels(page, "#job-memory-plot") == ["rank 0", "rank 1"]
        # The charts under the loss keep up with it: drawn a tick in three, never "no points
        # yet" beside a loss of a dozen steps.
        deadline = time.monotonic() + 60
        while max(line_points(page, "#job-loss-plot") or [0]) < 12 \
                and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(4)  # three ticks: each of the lower groups has been drawn once since
        for chart in ("#job-lr-plot", "#job-grad-norm-plot", "#job-step-time-plot"):
            assert sum(line_points(page, chart)) >= 1, f"{chart} has no points"
        events = page.locator("#job-events")
        assert_cells_break_only_between_words(events)  # a kind is never "failur/e"
        for cell in events.locator("[data-testid^='cell-'][data-testid$='-2']").all():
            clipped = cell.evaluate("node => node.scrollWidth > node.clientWidth + 1")
            assert not clipped, cell.inner_text()  # whole messages, wrapped
        page.locator("#job-log-scale input").check()
        expect(page.locator("#job-loss-plot .td-y-title")).to_have_text("loss (log scale)")
        _shot(page, "job-running")


def test_a_cancelled_job_drops_the_cancel_note_and_says_why_resume_is_greyed(
        browser, tunedeck_server, jobs):
    expect = _expect()
    long_job, short_job = jobs
    with _opened(browser, tunedeck_server, f"/?job={long_job}") as page:
        expect(page.locator("#job-status")).to_contain_text("running")
        page.locator("#job-cancel").click()
        # Cancel asks first; "Keep it running" puts the question away.
        expect(page.locator("#job-cancel-confirm")).to_have_text(f"Yes, cancel job {long_job}")
        page.locator("#job-cancel-keep").click()
        expect(page.locator("#job-cancel-confirm")).to_be_hidden()
        assert tunedeck_server.job(long_job)["status"] == "running"
        page.locator("#job-cancel").click()
        page.locator("#job-cancel-confirm").click()
        note = page.locator("#job-cancel-result")
        expect(note).to_contain_text("Cancel requested")
        tunedeck_server.wait_for(long_job, {"cancelled"}, timeout_seconds=WAIT_SECONDS)
        expect(page.locator("#job-status")).to_contain_text("cancelled")
        expect(note).not_to_contain_text("Cancel requested")
        expect(page.locator("#job-resume")).to_be_disabled()
        expect(page.locator("#job-resume-hint")).to_contain_text(
            "Resume needs a checkpoint, and this job saved none")
        _shot(page, "job-cancelled")
        tunedeck_server.wait_for(short_job, {"succeeded"}, timeout_seconds=WAIT_SECONDS)


def test_eval_losses_are_points_over_the_smoothed_training_line(browser, tunedeck_server, jobs):
    expect = _expect()
    evaluated = tunedeck_server.submit({**SHORT, "name": "pages-eval", "eval_split": 0.25,
                                        "eval_every_steps": 1})
    job = tunedeck_server.wait_for(evaluated, {"succeeded", "failed", "cancelled"},
                                   timeout_seconds=WAIT_SECONDS)
    assert job["status"] == "succeeded", (job["error"], tunedeck_server.log_tail(evaluated))
    with _opened(browser, tunedeck_server, f"/?job={evaluated}") as page:
        plot = "#job-loss-plot"
        expect(page.locator(f"{plot} .td-legend")).to_contain_text("eval")
        assert legend_labels(page, plot) == ["train (raw)", "train", "eval"]
        # A point an eval (after each of the 3 steps), drawn over the two lines of 3 points.
        assert line_points(page, plot) == [3, 3, 3]
        eval_kind = page.locator(f'{plot} path[data-series="eval"]').get_attribute("class")
        assert "td-points" in eval_kind
        # Hovering the plot names each line's value at that step: at its right edge, step 3.
        area = page.locator(f"{plot} .td-chart-plot")
        box = area.bounding_box()
        page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
        tip = page.locator(".td-tip:visible")
        expect(tip).to_have_count(1)
        expect(tip).to_contain_text("step 3")
        expect(tip).to_contain_text("train:")
        expect(tip).to_contain_text("eval:")
        _shot(page, "job-eval")


def test_the_cluster_tab_describes_a_host_without_gpus(wide_page, jobs):
    expect, page = _expect(), wide_page
    _tab(page, "Cluster")
    hosts = page.locator("#cluster-cpu-hosts")
    expect(hosts).to_contain_text("CPU host")
    expect(hosts).to_contain_text("jobs run on CPU ranks, one at a time")
    expect(hosts).to_contain_text(re.compile(r"\d+ cores"))
    expect(page.locator("#cluster-gpus")).to_be_hidden()
    _shot(page, "cluster")


def test_compare_picks_jobs_from_a_list_and_says_what_to_do_before(wide_page, jobs):
    expect, page = _expect(), wide_page
    long_job, short_job = jobs
    tunedeck_server_jobs = {long_job, short_job}
    _tab(page, "Compare")
    expect(page.locator("#compare-message")).to_contain_text("Pick two or more jobs")
    expect(page.locator("#compare-summary")).to_be_hidden()
    expect(page.locator("#compare-diff")).to_be_hidden()
    picker = page.locator("#compare-picker input")
    for job_id in sorted(tunedeck_server_jobs):
        picker.click()
        page.get_by_role("option", name=re.compile(rf"^{job_id} · ")).click()
    ids = page.locator("#compare-ids textarea, #compare-ids input").first
    expect(ids).to_have_value(", ".join(str(job_id) for job_id in sorted(tunedeck_server_jobs)))
    page.locator("#compare-button").click()
    expect(page.locator("#compare-summary")).to_be_visible()
    expect(page.locator("#compare-summary")).to_contain_text("final loss")
    expect(page.locator("#compare-diff")).to_contain_text("max_steps")
    deadline = time.monotonic() + 30
    while len(line_colours(page, "#compare-loss-plot")) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)  # the charts draw on the page's own timer
    loss_colours = line_colours(page, "#compare-loss-plot")
    assert len(loss_colours) == 2 and None not in loss_colours, loss_colours
    memory_colours = set(line_colours(page, "#compare-memory-plot"))
    assert memory_colours <= set(loss_colours), memory_colours  # a job's ranks in its colour
    _shot(page, "compare")


def test_a_failed_job_opens_on_its_failure_with_no_empty_charts(browser, tunedeck_server, jobs):
    expect = _expect()
    long_job, _short = jobs
    tunedeck_server.http.post(f"/api/jobs/{long_job}/cancel")  # the worker's one slot
    tunedeck_server.wait_for(long_job, {"cancelled"}, timeout_seconds=WAIT_SECONDS)
    # A hub id in no cache, offline: the worker's check says so before loading, in words
    # with an apostrophe and backticks ("this host's Hugging Face cache", "`hf download`")
    # that the panel, the error box and the Jobs table each escape once, for what they are
    # drawn in.
    absent = "tunedeck-test/absent-model"
    failed = tunedeck_server.submit({**SHORT, "name": "pages-failed", "model": absent})
    job = tunedeck_server.wait_for(failed, {"failed", "succeeded", "cancelled"},
                                   timeout_seconds=WAIT_SECONDS)
    assert (job["status"], job["failure_kind"]) == ("failed", "not_cached_offline"), job
    quoted = "this host's Hugging Face cache"
    with _opened(browser, tunedeck_server, f"/?job={failed}") as page:
        reason = page.locator("#job-failure-reason")
        expect(reason).to_be_visible()
        expect(page.locator("#job-error")).to_contain_text(quoted)
        shown = page.locator("#job-error").inner_text()
        assert quoted in shown and f"`hf download {absent}`" in shown, shown
        assert "&#x27;" not in shown and "&amp;" not in shown, shown
        # Said once: the failure panel under it points up rather than quoting it again.
        expect(reason).to_contain_text("nothing to change in the spec: the error above says what")
        assert quoted not in reason.inner_text()
        above = reason.evaluate("node => node.getBoundingClientRect().top")
        below = page.locator("#job-progress").evaluate("node => node.getBoundingClientRect().top")
        assert above < below, (above, below)  # why it failed comes first
        for chart in ("#job-loss-plot", "#job-throughput-plot", "#job-memory-plot",
                      "#job-lr-plot", "#job-step-time-plot"):
            expect(page.locator(chart)).to_be_hidden()  # nothing was measured
        _shot(page, "job-failed")
        _tab(page, "Jobs")
        expect(page.locator("#jobs-table")).to_contain_text("pages-failed")
        rows = {row["name"]: row for row in table_rows(page, "#jobs-table")}
        shown = rows["pages-failed"]["reason"]
        assert shown.startswith("not cached offline: ") and "\\" not in shown, shown
        assert f"model {absent}:" in shown, shown  # not with Markdown's escapes inside


def test_the_model_and_dataset_fields_offer_recent_and_available_values(browser,
                                                                       tunedeck_server, jobs):
    expect = _expect()
    # The allowed folder (tests/conftest.py: the session's temporary folder, which holds
    # every test's folders: a name that sorts first is within the form's scan limit).
    own = Path(os.environ["TUNEDECK_ALLOWED_ROOTS"]) / "0-support-chats.jsonl"
    own.write_text('{"prompt": "Hi", "response": "Hello"}\n')
    with _opened(browser, tunedeck_server) as page:
        dataset = page.locator("#new-job-dataset textarea, #new-job-dataset input").first
        dataset.fill("org/typo")
        offered = page.locator("#new-job-dataset-suggestions input")
        offered.click()
        # The user's newest job's dataset first, then the older ones, the built-in one and
        # what the folder holds.
        newest = tunedeck_server.http.get("/api/jobs").json()[0]["spec"]["dataset"]
        options = page.get_by_role("option")
        expect(options.first).to_have_attribute("aria-label", newest)
        expect(page.get_by_role("option", name=str(own))).to_be_visible()
        labels = options.evaluate_all("items => items.map(item => item.ariaLabel)")
        assert len(labels) == len(set(labels)), labels  # each value offered once
        assert "builtin:arithmetic" in labels and labels.index(str(own)) > 0, labels
        _shot(page, "new-job-suggestions")
        page.get_by_role("option", name=str(own)).click()
        expect(dataset).to_have_value(str(own))


def assert_cells_break_only_between_words(table) -> None:
    """A table's cells break only between words (a name at its hyphens, never "arithmeti/c"
    or "succeede/d"): every element inside them, not only the first (Gradio 6 wraps the text
    in a span of its own that breaks anywhere). The last column (a reason, a message) may
    break a path wider than itself. No text reaches past its cell."""
    for cell in table.locator("[data-testid^='cell-']").all():
        styles = cell.evaluate(
            "node => [node, ...node.querySelectorAll('*')].map(el => {"
            " const s = getComputedStyle(el); return s.wordBreak + ' ' + s.overflowWrap; })")
        last = cell.evaluate("node => node === node.parentElement.lastElementChild")
        if not last:
            assert set(styles) == {"normal normal"}, (cell.inner_text(), styles)
        overflow = cell.evaluate(
            "node => { const edge = node.getBoundingClientRect().right; let right = 0;"
            " for (const el of node.querySelectorAll('*')) { const range = document.createRange();"
            " range.selectNodeContents(el);"
            " for (const rect of range.getClientRects()) right = Math.max(right, rect.right); }"
            " return right - edge; }")
        assert overflow <= 1, (cell.inner_text(), overflow)
