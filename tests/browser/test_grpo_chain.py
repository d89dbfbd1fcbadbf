"""SFT, then GRPO from its weights, from the browser on a real `tunedeck up`: a succeeded SFT
job's page offers "Continue from this job", which opens the New job form with the model set
to the job's weights; picking GRPO shows its sampling, rewards and loss options (and fits the
batch to whole groups); the GRPO job it submits trains, and its page shows the lineage, the
RL charts and the rollouts table. Screenshots: /tmp/tunedeck-screens/grpo-*.png."""
from __future__ import annotations

import pytest

from harness.servers import wait_until
from tests.browser.conftest import SCREEN_VIEWPORT as VIEWPORT, SCREENS, signed_in_page
from tests.browser.test_new_job_dpo import field_input, submitted_job_id

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]

SFT_JOB = {"name": "browser-sft", "dataset": "builtin:arithmetic", "num_gpus": 2,
           "max_steps": 60, "learning_rate": 5e-3, "micro_batch_size": 4, "seq_len": 64}
JOB_SECONDS = 240


def test_sft_then_grpo_from_the_job_page_trains_and_shows_its_rollouts(
        browser, tunedeck_server, api):
    from playwright.sync_api import expect

    response = api.post("/api/jobs", json=SFT_JOB)
    assert response.status_code == 201, response.text
    sft = response.json()["id"]
    wait_until(lambda: api.get(f"/api/jobs/{sft}").json()["status"] == "succeeded",
               JOB_SECONDS, f"SFT job {sft} to succeed")
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT,
                          path=f"/?job={sft}")
    try:
        expect(page.locator("#job-status")).to_contain_text("succeeded")
        page.locator("#job-continue").click()
        expect(page.get_by_role("tab", name="New job", exact=True)).to_have_attribute(
            "aria-selected", "true")
        expect(field_input(page, "model")).to_have_value(f"job:{sft}")
        sampling = page.locator("#new-job-grpo-sampling-options").first
        expect(sampling).to_be_hidden()
        page.locator("#new-job-objective").get_by_label("GRPO", exact=True).check()
        expect(sampling).to_be_visible()
        expect(page.locator("#new-job-grpo-rewards-options").first).to_be_visible()
        expect(page.locator("#new-job-grpo-loss-options").first).to_be_visible()
        expect(field_input(page, "dataset")).to_have_value("builtin:arithmetic-rl")
        expect(field_input(page, "micro-batch-size")).to_have_value("8")  # whole groups of 8
        expect(page.locator("#new-job-grpo-scorers")).to_contain_text("numeric_match")
        # The tiny model's run: short completions, groups of 4, a reward it can learn.
        for name, value in (("max-steps", "20"), ("learning-rate", "0.003"), ("seq-len", "48"),
                            ("grpo-num-generations", "4"),
                            ("grpo-max-completion-length", "8")):
            field_input(page, name).fill(value)
        field_input(page, "grpo-rewards").fill(
            '- {name: contains, text: "7"}\n- {name: numeric_match, tolerance: 10, weight: 0.5}')
        field_input(page, "num-gpus").fill("2")
        field_input(page, "num-gpus").press("Tab")  # the last box's change lands
        expect(page.locator("#new-job-trainer-settings")).to_contain_text('"objective": "grpo"')
        expect(page.locator("#new-job-errors")).not_to_contain_text("Please fix")
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "grpo-new-job.png"), full_page=True)
        page.locator("#new-job-submit").click()
        grpo = submitted_job_id(page)
        spec = api.get(f"/api/jobs/{grpo}").json()["spec"]
        assert spec["model"] == f"job:{sft}" and spec["objective"] == "grpo"
        assert [reward["name"] for reward in spec["grpo"]["rewards"]] == ["contains",
                                                                          "numeric_match"]
        expect(page.locator("#job-status")).to_contain_text(f"Job {grpo}")
        expect(page.locator("#job-status")).to_contain_text("succeeded",
                                                            timeout=JOB_SECONDS * 1000)
        expect(page.locator("#job-lineage")).to_contain_text(f"#{sft} sft lora")
        expect(page.locator("#job-lineage")).to_contain_text(f"#{grpo} grpo lora")
        for chart in ("reward", "completion-length", "clip-ratio", "step-time-split"):
            expect(page.locator(f"#job-{chart}-plot")).to_be_visible()
        rollouts = page.locator("#job-rollouts")
        expect(rollouts).to_be_visible()
        expect(rollouts).to_contain_text("Prompt:")
        expect(rollouts.locator("tr.rollout-prompt").first).to_contain_text("What is")
        page.locator("#job-reward-plot").scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENS / "grpo-job-charts.png"))
        rollouts.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENS / "grpo-job-rollouts.png"))
        page.screenshot(path=str(SCREENS / "grpo-job.png"), full_page=True)
    finally:
        page.context.close()
