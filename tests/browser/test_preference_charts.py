"""A preference (DPO) job's charts in a real browser at 1440 x 900: its job page draws
Rewards (chosen and rejected), Reward margin, Preference accuracy and Log-probs under the
loss, smoothed as the loss is; an SFT job's page has none of them; the Compare tab overlays
them across the DPO jobs. Screenshots go to SCREENS, to be looked at.

No trainer runs: the jobs wait on a queue no worker serves, and their step points are
written into the server's own database through the store, as the worker stores a rank's
lines (the page cannot tell the difference).
"""
from __future__ import annotations

import math
import re

import pytest

from harness.servers import RunningServer
from tests.browser.chart_reading import legend_labels, line_colours, line_points
from tests.browser.conftest import SCREEN_VIEWPORT as VIEWPORT, SCREENS, signed_in_page

pytestmark = [pytest.mark.browser]

STEPS = 60
NOBODYS_QUEUE = "preference-charts-nobody"  # no worker serves it: the jobs stay queued
JOB = {"model": "builtin:tiny-llama", "method": "lora", "backend": "fsdp", "num_gpus": 2,
       "max_steps": STEPS, "queue": NOBODYS_QUEUE}
DPO = {**JOB, "objective": "dpo", "dataset": "builtin:arithmetic-preference"}
SFT = {**JOB, "dataset": "builtin:arithmetic"}
PREFERENCE_PLOTS = ("#job-rewards-plot", "#job-reward-margin-plot", "#job-reward-accuracy-plot",
                    "#job-logps-plot")
COMPARE_PLOTS = ("#compare-rewards-plot", "#compare-reward-margin-plot",
                 "#compare-reward-accuracy-plot", "#compare-logps-plot")


def _step(step: int, *, beta: float, preference: bool) -> dict:
    """A step line as the trainer writes it: a DPO run's rewards part ways as it learns (with
    some noise from batch to batch, for the smoothing to show)."""
    noise = 0.3 * math.sin(step * 1.7)
    learned = 1 - math.exp(-step / 15)
    row = {"kind": "step", "rank": 0, "time": 1000.0 + step, "step": step,
           "loss": 0.693 * (1 - 0.6 * learned) + 0.05 * noise, "learning_rate": 1e-4,
           "grad_norm": 1.0, "tokens_per_second": 900.0, "step_seconds": 0.5, "tokens": 450}
    if preference:
        chosen = beta * (8 * learned + 2 * noise)
        rejected = -beta * (12 * learned + 3 * noise * math.cos(step))
        row |= {"rewards_chosen": chosen, "rewards_rejected": rejected,
                "reward_margin": chosen - rejected,
                "reward_accuracy": min(1.0, 0.5 + 0.45 * learned + 0.08 * noise),
                "logps_chosen": -60.0 + 10 * chosen / beta, "logps_rejected": -62.0 + 10 * rejected / beta}
    return row


def _store_steps(server: RunningServer, job_id: int, *, beta: float, preference: bool) -> None:
    from tunedeck.db.engine import Database
    from tunedeck.metrics import store as metric_store

    database = Database(f"sqlite:///{server.home / 'tunedeck.db'}")
    try:
        with database.transaction() as session:
            metric_store.add_metric_points(session=session, job_id=job_id, events=[
                (step, _step(step, beta=beta, preference=preference))
                for step in range(1, STEPS + 1)])
    finally:
        database.dispose()


@pytest.fixture(scope="module")
def jobs(tunedeck_server: RunningServer) -> tuple[int, int, int]:
    """(a DPO job, another one with a larger beta, an SFT job), each with STEPS step points."""
    ids = (tunedeck_server.submit({**DPO, "name": "dpo-beta-0.1"}),
           tunedeck_server.submit({**DPO, "name": "dpo-beta-0.3", "dpo": {"beta": 0.3}}),
           tunedeck_server.submit({**SFT, "name": "sft"}))
    for job_id, beta, preference in zip(ids, (0.1, 0.3, 0.0), (True, True, False)):
        _store_steps(tunedeck_server, job_id, beta=beta, preference=preference)
    return ids


def _expect():
    from playwright.sync_api import expect

    return expect


def _shot(page, name: str) -> None:
    SCREENS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)


def _job_page(browser, server: RunningServer, job_id: int):
    page = signed_in_page(browser, server.base_url, viewport=VIEWPORT, path=f"/?job={job_id}")
    _expect()(page.locator("#job-status")).to_contain_text(f"Job {job_id}")
    _expect()(page.locator("#job-loss-plot path.td-series").first).to_be_attached()
    return page


def test_a_dpo_jobs_page_draws_its_rewards_margin_accuracy_and_log_probs(browser,
                                                                         tunedeck_server, jobs):
    expect = _expect()
    page = _job_page(browser, tunedeck_server, jobs[0])
    try:
        for plot in PREFERENCE_PLOTS:
            expect(page.locator(plot)).to_be_visible()
        expect(page.locator("#job-rewards-plot")).to_contain_text("Rewards")
        expect(page.locator("#job-reward-margin-plot")).to_contain_text("Reward margin")
        expect(page.locator("#job-reward-accuracy-plot")).to_contain_text("Preference accuracy")
        expect(page.locator("#job-logps-plot")).to_contain_text("Log-probs")
        # Smoothed as the loss (the page's default 0.6): each line over its faint raw one,
        # a point a step; chosen green, rejected red.
        assert legend_labels(page, "#job-rewards-plot") == [
            "chosen (raw)", "chosen", "rejected (raw)", "rejected"]
        assert line_points(page, "#job-rewards-plot") == [STEPS] * 4
        assert line_points(page, "#job-reward-accuracy-plot") == [STEPS] * 2
        assert set(line_colours(page, "#job-logps-plot")) >= {"#2ca02c", "#d62728"}
        page.locator("#job-rewards-plot").scroll_into_view_if_needed()
        _shot(page, "preference-job-page")
        # No smoothing: the raw lines alone.
        page.locator("#job-smoothing input[type=number]").fill("0")
        page.locator("#job-smoothing input[type=number]").press("Enter")
        expect(page.locator("#job-rewards-plot .td-legend-item")).to_have_count(2)
        assert legend_labels(page, "#job-rewards-plot") == ["chosen", "rejected"]
    finally:
        page.context.close()


def test_an_sft_jobs_page_has_no_preference_charts(browser, tunedeck_server, jobs):
    expect = _expect()
    page = _job_page(browser, tunedeck_server, jobs[2])
    try:
        expect(page.locator("#job-loss-plot")).to_be_visible()
        expect(page.locator("#job-lr-plot")).to_be_visible()
        expect(page.locator("#job-preference-charts")).not_to_be_visible()
        for plot in PREFERENCE_PLOTS:
            expect(page.locator(plot)).not_to_be_visible()
        _shot(page, "preference-sft-job-page")
    finally:
        page.context.close()


def test_compare_overlays_the_dpo_jobs_preference_figures(browser, tunedeck_server, jobs):
    expect = _expect()
    first, second, sft = jobs
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        page.get_by_role("tab", name="Compare", exact=True).click()
        page.locator("#compare-ids textarea, #compare-ids input").first.fill(
            f"{first}, {second}, {sft}")
        page.locator("#compare-button").click()
        expect(page.locator("#compare-message")).to_contain_text(f"job {sft}")
        for plot in COMPARE_PLOTS:
            expect(page.locator(plot)).to_be_visible()
        one, two = f"job {first} (dpo · fsdp)", f"job {second} (dpo · fsdp)"
        plot = "#compare-reward-margin-plot"
        expect(page.locator(f"{plot} g.mark-line path")).to_have_count(2)  # not the SFT job's
        assert sorted(line_points(page, plot)) == [STEPS, STEPS]
        assert sorted(legend_labels(page, plot)) == [one, two]
        # Rewards: chosen and rejected a job, the job's colour and a lighter one of it.
        rewards = "#compare-rewards-plot"
        expect(page.locator(f"{rewards} g.mark-line path")).to_have_count(4)
        assert sorted(legend_labels(page, rewards)) == sorted(
            f"{job} {line}" for job in (one, two) for line in ("chosen", "rejected"))
        assert len(set(line_colours(page, rewards))) == 4
        summary = page.locator("#compare-summary")
        expect(summary).to_contain_text("reward margin (last 20 steps)")
        expect(summary).to_contain_text(re.compile(r"preference accuracy \(last 20 steps\)"))
        page.locator(COMPARE_PLOTS[0]).scroll_into_view_if_needed()
        _shot(page, "preference-compare")
    finally:
        page.context.close()
