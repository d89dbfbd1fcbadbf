""""Try it" in a real browser at 1440 x 900: a short LoRA job on builtin:tiny-llama
succeeds, its page shows the panel (a running job's does not), a prompt typed at
temperature 0 with "Compare with base" gets both answers side by side, and the fine-tuned
one is the text the REST API gives for the same prompt. The server waits only 1 s for an
answer, so the first (cold) answers come in through the panel's poll. The screenshot goes
to SCREENS."""
from __future__ import annotations

import html
import re

import pytest

from harness.servers import RunningServer, add_account, running_tunedeck
from tests.browser.conftest import (PASSWORD, SCREEN_VIEWPORT, SCREENS, SERVER_START_SECONDS,
                                    USER, signed_in_page)

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]

JOB = {"name": "try-it-browser", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
       "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 16,
       "learning_rate": 1e-2, "micro_batch_size": 8, "seq_len": 64, "precision": "bf16",
       "lora": {"r": 8, "alpha": 16, "dropout": 0.0}}
PROMPT = "What is 12 + 7?"
ANSWER_SECONDS = 120


@pytest.fixture(scope="module")
def tunedeck_server(tmp_path_factory) -> RunningServer:
    """tests/browser/conftest.py's server, whose generate requests wait 1 s (not 45)."""
    home = tmp_path_factory.mktemp("tunedeck-home")
    token = add_account(home, USER, PASSWORD)
    with running_tunedeck(home, startup_seconds=SERVER_START_SECONDS, token=token,
                          extra_env={"TUNEDECK_GENERATION_WAIT_SECONDS": "1"}) as running:
        yield running


def test_a_prompt_typed_on_the_job_page_gets_the_fine_tuned_and_the_base_answer(
        browser, tunedeck_server: RunningServer):
    from playwright.sync_api import expect

    job_id = tunedeck_server.submit(JOB)
    job = tunedeck_server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
    assert job["status"] == "succeeded", job["error"]
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=SCREEN_VIEWPORT,
                          path=f"/?job={job_id}")
    try:
        panel = page.locator("#job-try-it")
        expect(panel).to_be_visible()
        page.locator("#try-it-prompt textarea").fill(PROMPT)
        temperature = page.locator("#try-it-temperature input[type=number]")
        temperature.fill("0")
        temperature.press("Enter")
        tokens = page.locator("#try-it-max-new-tokens input")
        tokens.fill("16")
        tokens.press("Tab")
        page.locator("#try-it-compare input[type=checkbox]").check()
        page.locator("#try-it-generate").click()
        # The cold load takes longer than the server's 1 s wait: first what it waits for.
        expect(page.locator('#try-it-answer [data-status="pending"], '
                            '#try-it-answer [data-status="running"]')).to_be_visible()

        tuned = page.locator('#try-it-answer [data-variant="merged"][data-status="done"]')
        base = page.locator('#try-it-base-answer [data-variant="base"][data-status="done"]')
        expect(tuned).to_be_visible(timeout=ANSWER_SECONDS * 1000)
        expect(base).to_be_visible(timeout=ANSWER_SECONDS * 1000)
        # The fine-tune learned to stop after its answer: up to 16 tokens, not always 16.
        expect(tuned.locator(".try-it-facts")).to_have_text(re.compile(r"^\d+ tokens in [\d.]+ m?s \([\d,]+ tokens/s\) on cpu"))
        tuned_box, base_box = tuned.bounding_box(), base.bounding_box()
        assert tuned_box["x"] + tuned_box["width"] <= base_box["x"] + 1  # side by side
        assert abs(tuned_box["y"] - base_box["y"]) < 5
        panel.scroll_into_view_if_needed()
        SCREENS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENS / "job-try-it.png"))

        shown = tuned.locator("pre.try-it-text").inner_text()
        api = tunedeck_server.http.post(f"/api/jobs/{job_id}/generate", json={
            "messages": [{"role": "user", "content": PROMPT}], "max_new_tokens": 16,
            "temperature": 0}).json()
        assert api["status"] == "done" and api["warm"] is True
        assert shown.strip() == html.unescape(api["text"]).strip()
        assert base.locator("pre.try-it-text").inner_text().strip() != shown.strip()
    finally:
        page.context.close()


def test_a_job_that_has_not_succeeded_shows_no_panel(browser, tunedeck_server: RunningServer,
                                                      tmp_path):
    from playwright.sync_api import expect

    missing = tmp_path / "missing.jsonl"  # inside the allowed folders, and not there
    job_id = tunedeck_server.submit({**JOB, "name": "try-it-fails", "dataset": str(missing)})
    tunedeck_server.wait_for(job_id, {"failed", "succeeded"}, timeout_seconds=120)
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=SCREEN_VIEWPORT,
                          path=f"/?job={job_id}")
    try:
        expect(page.locator("#job-status")).to_contain_text("failed")
        expect(page.locator("#job-try-it")).to_be_hidden()
    finally:
        page.context.close()
