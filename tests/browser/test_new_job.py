"""The New job form in a browser, on this CPU-only host's `tunedeck up` (its worker
registers with no GPU): a choice the host cannot run is marked beside its field."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.conftest import signed_in_page

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]

SCREENS = Path("/tmp/tunedeck-screens")
VIEWPORT = {"width": 1440, "height": 900}


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
