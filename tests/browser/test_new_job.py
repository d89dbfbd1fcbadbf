"""The New job form in a browser, on this CPU-only host's `tunedeck up` (its worker
registers with no GPU): a choice the host cannot run is marked beside its field."""
from __future__ import annotations

import re

import pytest

from tests.browser.conftest import SCREEN_VIEWPORT as VIEWPORT, SCREENS, signed_in_page

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]



def test_fp16_under_zero2_is_refused_beside_precision_on_a_host_without_gpus(
        browser, tunedeck_server, api):
    from playwright.sync_api import expect

    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        field = page.locator("#new-job-precision")
        page.get_by_label("fp16", exact=True).check()
        expect(field).to_have_class(re.compile(r"\bfield-error\b"), timeout=30_000)
        expect(field).to_contain_text("this host has no GPU")
        expect(field).to_contain_text("pick bf16 or fp32")
        expect(page.locator("#new-job-errors")).to_contain_text("Precision (precision)")
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "new-job-host-refused.png"), full_page=True)
        page.get_by_label("bf16", exact=True).check()
        expect(field).not_to_have_class(re.compile(r"\bfield-error\b"))
    finally:
        page.context.close()


def test_a_saved_preset_loads_back_into_the_form(browser, tunedeck_server, api):
    from playwright.sync_api import expect

    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        seq_len = page.locator("#new-job-seq-len input")
        seq_len.fill("1024")
        # LoRA's usual rate on the built-in model: Load must not let the model's change
        # event swap it for the built-in model's default.
        learning_rate = page.locator("#new-job-learning-rate input")
        learning_rate.fill("0.0002")
        page.get_by_label("fsdp", exact=True).check()
        expect(page.locator("#new-job-fsdp-sharding-strategy")).to_be_visible()
        page.locator("#new-job-preset-name input, #new-job-preset-name textarea").first.fill(
            "long fsdp")
        page.locator("#new-job-preset-save").click()
        expect(page.locator("#new-job-preset-result")).to_contain_text(
            "Saved preset long fsdp")
        # Stored as the signed-in user's, through the same action the API uses.
        stored = api.get("/api/presets/long fsdp").json()["spec"]
        assert (stored["seq_len"], stored["backend"], stored["learning_rate"]) == (
            1024, "fsdp", 2e-4)

        seq_len.fill("512")
        page.locator("#new-job-model input, #new-job-model textarea").first.fill(
            "example-org/another-model")
        page.get_by_label("zero2", exact=True).check()
        expect(page.locator("#new-job-fsdp-sharding-strategy")).to_be_hidden()
        page.locator("#new-job-preset input").click()
        page.get_by_role("option", name="long fsdp", exact=True).click()
        page.locator("#new-job-preset-load").click()
        expect(page.locator("#new-job-preset-result")).to_contain_text(
            "Loaded preset long fsdp")
        expect(seq_len).to_have_value("1024")
        expect(page.locator("#new-job-model input, #new-job-model textarea").first).to_have_value(
            "builtin:tiny-llama")
        page.wait_for_timeout(1000)  # the model's change event, had it swapped the rate
        expect(learning_rate).to_have_value("0.0002")
        expect(page.get_by_label("fsdp", exact=True)).to_be_checked()
        expect(page.locator("#new-job-fsdp-sharding-strategy")).to_be_visible()
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "new-job-presets.png"))
    finally:
        page.context.close()
