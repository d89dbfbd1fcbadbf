"""Objective DPO from the New job form, in a browser on a real `tunedeck up`: picking DPO
beside Method shows the preference settings and the chosen/rejected column pickers, swaps
the built-in dataset for the preference one, and Submit stores a spec with objective dpo;
SFT again hides them and submits a plain SFT spec. (The jobs may fail or wait on this
host's worker: only their specs are read.)"""
from __future__ import annotations

import re

import pytest

from tests.browser.conftest import SCREEN_VIEWPORT as VIEWPORT, SCREENS, signed_in_page

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]


def field_input(page, name: str):
    return page.locator(f"#new-job-{name} input, #new-job-{name} textarea").first


def submitted_job_id(page, previous: int | None = None) -> int:
    from playwright.sync_api import expect

    result = page.locator("#new-job-result")
    expect(result).to_contain_text("Submitted job")
    if previous is not None:
        expect(result).not_to_contain_text(f"Submitted job {previous} ")
    return int(re.search(r"Submitted job (\d+)", result.inner_text())[1])


def test_objective_dpo_shows_its_settings_swaps_the_dataset_and_submits_a_dpo_spec(
        browser, tunedeck_server, api):
    from playwright.sync_api import expect

    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        # A group's id is on its outer and inner box both.
        options = page.locator("#new-job-dpo-options").first
        dataset = field_input(page, "dataset")
        expect(options).to_be_hidden()
        expect(dataset).to_have_value("builtin:arithmetic")
        # Short jobs: this host's worker may take them.
        field_input(page, "max-steps").fill("2")
        objective = page.locator("#new-job-objective")
        # In Method's box, right above it.
        box = page.locator("#new-job-objective-and-method").first
        expect(box.locator("#new-job-objective")).to_be_visible()
        expect(box.locator("#new-job-method")).to_be_visible()
        gap = (page.locator("#new-job-method").bounding_box()["y"]
               - objective.bounding_box()["y"])
        assert 0 < gap < 200, gap
        tops = objective.locator("label").evaluate_all(
            "labels => labels.map(label => Math.round(label.getBoundingClientRect().top))")
        assert len(tops) == 3 and len(set(tops)) == 1, tops  # SFT, DPO, GRPO on one row
        objective.get_by_label("DPO", exact=True).check()

        expect(options).to_be_visible()
        expect(dataset).to_have_value("builtin:arithmetic-preference")
        expect(field_input(page, "dpo-beta")).to_have_value("0.1")
        for name in ("dpo-loss", "dpo-label-smoothing", "dpo-reference", "dpo-sft-weight",
                     "dpo-simpo-gamma"):
            expect(page.locator(f"#new-job-{name}")).to_be_visible()
        expect(options).to_contain_text("Preference loss")
        expect(options).to_contain_text("How far the policy may move from the reference")
        field_input(page, "dpo-beta").fill("0.25")
        # The pairs' columns beside the shared prompt's; sft's own are put away.
        page.locator("#new-job-dataset-options").get_by_text(
            "Dataset config, split and columns").click()
        for role in ("prompt", "chosen", "rejected"):
            expect(page.locator(f"#new-job-columns-{role}")).to_be_visible()
        for role in ("response", "messages"):
            expect(page.locator(f"#new-job-columns-{role}")).to_be_hidden()
        expect(page.locator("#new-job-trainer-settings")).to_contain_text('"objective": "dpo"')
        expect(page.locator("#new-job-trainer-settings")).to_contain_text('"beta": 0.25')
        expect(page.locator("#new-job-errors")).not_to_contain_text("Please fix")
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "new-job-dpo.png"), full_page=True)
        page.screenshot(path=str(SCREENS / "new-job-dpo-top.png"))

        page.locator("#new-job-submit").click()
        job_id = submitted_job_id(page)
        spec = api.get(f"/api/jobs/{job_id}").json()["spec"]
        assert (spec["objective"], spec["dataset"]) == ("dpo", "builtin:arithmetic-preference")
        assert spec["dpo"]["beta"] == 0.25 and spec["dpo"]["loss"] == "sigmoid"
        assert not spec["packing"] and not spec["padding_free"]

        # Back to SFT: its dataset, its columns, no preference settings in what it submits
        # (Submit opened the new job: the form is one tab back, as it was left). The result
        # line is written before the tab switch lands: going back before it lands has the
        # switch take the form away again.
        expect(page.get_by_role("tab", name="Job", exact=True)).to_have_attribute(
            "aria-selected", "true")
        expect(page.locator("#job-status")).to_contain_text(f"Job {job_id}")
        page.get_by_role("tab", name="New job", exact=True).click()
        expect(page.get_by_role("tab", name="New job", exact=True)).to_have_attribute(
            "aria-selected", "true")
        objective.get_by_label("SFT", exact=True).check()
        expect(options).to_be_hidden()
        expect(dataset).to_have_value("builtin:arithmetic")
        expect(page.locator("#new-job-columns-chosen")).to_be_hidden()
        expect(page.locator("#new-job-columns-response")).to_be_visible()
        expect(page.locator("#new-job-trainer-settings")).to_contain_text('"objective": "sft"')
        page.locator("#new-job-submit").click()
        sft_id = submitted_job_id(page, previous=job_id)
        assert sft_id != job_id
        spec = api.get(f"/api/jobs/{sft_id}").json()["spec"]
        assert (spec["objective"], spec["dataset"]) == ("sft", "builtin:arithmetic")
        assert spec["dpo"]["beta"] == 0.1  # the section's default: nothing carried over
    finally:
        page.context.close()
