"""Issue 5 in a real browser: the job page's live charts (memory per rank, loss, the progress
bar with its ETA), the Compare tab's overlaid loss and spec diff, the jobs table's figures,
and the Cluster tab.

Two tiny LoRA jobs (2 CPU ranks each, FSDP; they differ in learning rate and name) are submitted
once through the HTTP API and shared by every test here; the worker runs one job at a time,
so the first is still running while the first test watches it.
"""
from __future__ import annotations

import re
import socket
import time
from typing import Callable, TypeVar

import pytest

from harness.servers import RunningServer
from tests.browser.conftest import signed_in_page
from tests.browser.tables import table_rows
from tests.browser.chart_reading import legend_labels, line_colours, line_points

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]

MAX_STEPS = 64  # several seconds of steps even on a warm start: several memory samples, a visible ETA
JOB_SECONDS = 300
CHART_SECONDS = 30  # the job page refreshes every second, the Compare tab every two
RANKS = ["rank 0", "rank 1"]
JOB = {"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic", "method": "lora",
       "backend": "fsdp", "num_gpus": 2, "max_steps": MAX_STEPS, "micro_batch_size": 8,
       "seq_len": 64, "precision": "bf16", "lora": {"r": 8, "alpha": 16, "dropout": 0.0}}
FAST_LR, SLOW_LR = 5e-3, 1e-3

T = TypeVar("T")


@pytest.fixture(scope="module")
def two_jobs(tunedeck_server: RunningServer) -> tuple[int, int]:
    """The ids of the two jobs, submitted (not yet finished) in this order."""
    first = tunedeck_server.submit({**JOB, "name": "live-fast", "learning_rate": FAST_LR})
    second = tunedeck_server.submit({**JOB, "name": "live-slow", "learning_rate": SLOW_LR})
    return first, second


@pytest.fixture(scope="module")
def early_compare_page(browser, tunedeck_server: RunningServer, two_jobs: tuple[int, int]):
    """A page on the Compare tab of both jobs, opened while the second is still queued: its
    line must join the chart (coloured, in the legend) once it reports, with no reload."""
    first, second = two_jobs
    page = signed_in_page(browser, tunedeck_server.base_url)
    _open_tab(page, "Compare")
    page.locator("#compare-ids textarea, #compare-ids input").first.fill(f"{first}, {second}")
    page.locator("#compare-button").click()
    _expect()(page.locator("#compare-message")).to_contain_text(f"job {second}")
    assert tunedeck_server.job(second)["status"] == "queued"  # else this page proves nothing
    yield page
    page.context.close()


def _succeeded(server: RunningServer, *job_ids: int) -> None:
    for job_id in job_ids:
        job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"},
                              timeout_seconds=JOB_SECONDS)
        assert job["status"] == "succeeded", (job_id, job["error"], server.log_tail(job_id))


def _expect():
    from playwright.sync_api import expect

    return expect


def _eventually(read: Callable[[], T], wanted: Callable[[T], bool], *, what: str = "",
                seconds: float = CHART_SECONDS) -> T:
    """`read()` once it is `wanted`; fails with the last reading. Charts redraw on the
    page's own timer, so a reading taken right after an event may still be the old one."""
    deadline = time.monotonic() + seconds
    while True:
        value = read()
        if wanted(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} still {value!r} after {seconds} s")
        time.sleep(0.5)


QUIET_TRIES = 8  # seconds to wait for ticks sent before a tab change to land


def _count_redraws(page, *selectors: str, seconds: float) -> dict[str, int]:
    """How many DOM changes each chart's drawing (a chart redrawn, or a vega view's parts;
    not Gradio's status line beside it) went through in `seconds`."""
    page.evaluate("""selectors => {
        window.__redraws = {};
        for (const selector of selectors) {
          window.__redraws[selector] = 0;
          const inDrawing = record => {
            const element = record.target.nodeType === 1 ? record.target
                                                         : record.target.parentElement;
            const drawn = [...record.addedNodes, ...record.removedNodes].some(
                node => node.nodeType === 1 && node.matches('.td-chart, .vega-embed'));
            return drawn || (element && element.closest('.vega-embed, svg, .td-chart'));
          };
          new MutationObserver(records => {
            window.__redraws[selector] += records.filter(inDrawing).length;
          }).observe(document.querySelector(selector),
                     {subtree: true, childList: true, attributes: true, characterData: true});
        }
    }""", list(selectors))
    time.sleep(seconds)
    return page.evaluate("() => window.__redraws")


def _open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()


def test_the_job_page_shows_progress_and_one_memory_line_per_rank(page, tunedeck_server,
                                                                   two_jobs, early_compare_page):
    # (early_compare_page: opened now, while the second job waits, and checked in the next test)
    expect = _expect()
    job_id = two_jobs[0]
    _open_tab(page, "Job")
    page.locator("#job-id input").fill(str(job_id))
    page.locator("#job-id input").press("Enter")
    expect(page.locator("#job-status")).to_contain_text(f"Job {job_id}")

    # While it runs: a progress bar out of max_steps, and the figures with an ETA.
    progress = page.locator("#job-progress")
    expect(progress.locator(f"progress[max='{MAX_STEPS}']")).to_be_attached()
    expect(progress).to_contain_text("ETA", timeout=JOB_SECONDS * 1000)
    expect(progress).to_contain_text(re.compile(rf"step \d+ / {MAX_STEPS}"))

    # What the user cannot see is not redrawn: the folded panel's charts, and the whole
    # page while another tab is shown; both catch up once seen again (below).
    page.locator("#job-more-charts").get_by_text("Learning rate, gradient norm").first.click()
    _open_tab(page, "Jobs")
    # A tick already on its way when the tab changed still lands, and on a busy machine
    # (the whole suite on 2 cores) a few may be queued: wait for a quiet second first. A
    # page that kept drawing while hidden never goes quiet, and the count below says so.
    time.sleep(1.5)
    for _ in range(QUIET_TRIES):
        if not any(_count_redraws(page, "#job-lr-plot", "#job-loss-plot",
                                  seconds=1.0).values()):
            break
    redraws = _count_redraws(page, "#job-lr-plot", "#job-loss-plot", seconds=3.0)
    assert redraws == {"#job-lr-plot": 0, "#job-loss-plot": 0}, redraws
    _open_tab(page, "Job")
    page.locator("#job-more-charts").get_by_text("Learning rate, gradient norm").first.click()

    _succeeded(tunedeck_server, job_id)
    expect(page.locator("#job-status")).to_contain_text("succeeded", timeout=CHART_SECONDS * 1000)
    expect(progress).to_contain_text(f"step {MAX_STEPS} / {MAX_STEPS}")
    expect(progress).not_to_contain_text("ETA")  # nothing left to estimate
    expect(progress.locator("progress")).to_have_attribute("value", str(MAX_STEPS))

    # Loss: one line (train only, no eval set) with a point a step.
    # Loss: the raw line (faint) and its smoothed line, a point a step (no eval set); with
    # smoothing at 0, the raw line alone.
    assert _eventually(lambda: line_points(page, "#job-loss-plot"),
                       lambda points: points == [MAX_STEPS, MAX_STEPS]) == [MAX_STEPS, MAX_STEPS]
    page.locator("#job-smoothing input[type=number]").fill("0")
    page.locator("#job-smoothing input[type=number]").press("Enter")
    assert _eventually(lambda: line_points(page, "#job-loss-plot"),
                       lambda points: points == [MAX_STEPS]) == [MAX_STEPS]

    # One memory chart on a CPU host: the worker's samples of each rank's RSS, a legend entry
    # and a coloured line of several points a rank.
    plot = "#job-memory-plot"
    assert _eventually(lambda: legend_labels(page, plot), lambda labels: labels == RANKS,
                       what=f"{plot} legend")
    colours = line_colours(page, plot)
    assert len(colours) == len(RANKS) and None not in colours, colours
    assert len(set(colours)) == len(RANKS), colours  # told apart by colour
    # The worker samples once a second, and a warm-started job of this size may last only a
    # few seconds: a line, not a count of seconds.
    assert min(line_points(page, plot)) >= 2, line_points(page, plot)
    expect(page.locator(plot)).to_contain_text("Memory per rank process (RSS)")
    expect(page.locator("#job-gpu-memory-plot")).to_have_count(0)  # not a second, near-same one


def test_compare_overlays_the_two_jobs_loss_and_names_the_differing_field(page, tunedeck_server,
                                                                          two_jobs,
                                                                          early_compare_page):
    expect = _expect()
    first, second = two_jobs
    _succeeded(tunedeck_server, first, second)
    _open_tab(page, "Compare")
    page.locator("#compare-ids textarea, #compare-ids input").first.fill(f"{first}, {second}")
    page.locator("#compare-button").click()
    expect(page.locator("#compare-message")).to_contain_text(f"job {first}")
    expect(page.locator("#compare-message")).to_contain_text(f"job {second}")

    labels = [f"job {first} (fsdp)", f"job {second} (fsdp)"]
    plot = "#compare-loss-plot"
    # The page opened after both finished, and the one opened while the second was queued.
    for compare_page, opened in ((page, "after"), (early_compare_page, "early")):
        assert _eventually(lambda: legend_labels(compare_page, plot), lambda seen: seen == labels,
                           what=f"{opened} page's legend") == labels
        assert _eventually(lambda: line_points(compare_page, plot),
                           lambda seen: seen == [MAX_STEPS, MAX_STEPS],
                           what=f"{opened} page's lines") == [MAX_STEPS, MAX_STEPS]
        colours = line_colours(compare_page, plot)
        assert None not in colours and len(set(colours)) == 2, (opened, colours)
        # One colour a job on every chart: throughput draws each job in its loss colour.
        throughput = _eventually(lambda: line_colours(compare_page, "#compare-throughput-plot"),
                                 lambda seen: len(seen) == 2, what=f"{opened} throughput")
        assert throughput == colours, (opened, throughput, colours)
    # One dash pattern a job too: curves that coincide still show both jobs.
    dashes = page.locator(f"{plot} g.mark-line path").evaluate_all(
        "paths => paths.map(path => getComputedStyle(path).strokeDasharray)")
    assert len(set(dashes)) == 2 and dashes[0] == "none", dashes
    figures = {row["figure"]: row for row in _eventually(
        lambda: table_rows(page, "#compare-summary"), lambda rows: len(rows) >= 5)}
    assert {"final loss", "best loss", "tokens/s (last 20 steps)", "peak memory (MB)",
            "wall time from the first loss", "start-up (to the first loss)"} <= set(figures), figures
    assert all(re.fullmatch(r"\d+\.\d{4}", figures["final loss"][label]) for label in labels)

    # One row a differing field (learning_rate and name here, nothing the jobs share), one
    # column a job.
    diff = _eventually(lambda: table_rows(page, "#compare-diff"), lambda rows: len(rows) == 2)
    by_field = {row["field"]: row for row in diff}
    assert set(by_field) == {"learning_rate", "name"}, diff
    assert by_field["learning_rate"] == {"field": "learning_rate", labels[0]: str(FAST_LR),
                                         labels[1]: str(SLOW_LR)}, diff


def test_the_jobs_table_shows_a_finished_jobs_figures(page, tunedeck_server, two_jobs):
    first = two_jobs[0]
    _succeeded(tunedeck_server, first)
    _open_tab(page, "Jobs")

    def first_jobs_row() -> dict[str, str]:
        return next((row for row in table_rows(page, "#jobs-table")
                     if row.get("id") == str(first)), {})

    row = _eventually(first_jobs_row, lambda seen: seen.get("status") == "succeeded")
    assert row["name"] == "live-fast", row
    assert row["progress"] == f"{MAX_STEPS} / {MAX_STEPS} (100%)", row
    assert re.fullmatch(r"\d+\.\d{4}", row["loss"]), row
    assert re.fullmatch(r"[\d,]+", row["tokens/s"]) and row["tokens/s"] != "0", row
    assert re.fullmatch(r"[\d,]+", row["peak MB"]) and row["peak MB"] != "0", row


def test_the_cluster_tab_lists_the_worker_and_a_waiting_job(page, tunedeck_server, two_jobs):
    """The Cluster tab: the worker of `tunedeck up` from its heartbeats (host, queue, state,
    what it has), and a job for a queue no worker serves, waiting with its reason."""
    for job_id in two_jobs:
        _succeeded(tunedeck_server, job_id)
    waiting = tunedeck_server.submit({"name": "for-nobody", "max_steps": 2, "queue": "h100"})
    _open_tab(page, "Cluster")
    host = socket.gethostname()

    def worker_rows() -> list[dict[str, str]]:
        return table_rows(page, "#cluster-workers")

    # The table refreshes every 2 s: the page may first show the jobs still running.
    workers = _eventually(worker_rows, lambda rows: bool(rows) and rows[0]["state"] == "online"
                          and rows[0]["jobs running"] == "idle")
    assert [(row["worker"], row["host"], row["queues"], row["state"]) for row in workers] == \
        [(f"{host}-default", host, "default", "online")]
    assert workers[0]["resources"].startswith("no GPU: ")  # this machine's ranks run on CPUs
    assert workers[0]["jobs running"] == "idle"
    queued = _eventually(lambda: table_rows(page, "#cluster-queued"),
                         lambda rows: any(row.get("id") == str(waiting) for row in rows))
    assert [(row["id"], row["queue or host"], row["waiting for"]) for row in queued] == \
        [(str(waiting), "h100", "waiting: no live worker serves queue 'h100'")]
