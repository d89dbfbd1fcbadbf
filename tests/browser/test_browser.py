"""The real thing in a real browser: `tunedeck up` (web + worker), driven by Debian's chromium.

Submits a short LoRA job from the form, then watches the job page's charts fill in.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from tests.browser.chart_reading import line_colours, line_points

pytestmark = pytest.mark.browser

SCREENSHOT = Path("/tmp/tunedeck-ui.png")
FORM_SCREENSHOT = Path("/tmp/tunedeck-new-job-checks.png")
JOB_SECONDS = 400  # a cold DeepSpeed op cache compiles for ~90 s before the first step
MAX_STEPS = 20
# The `server`, `api` (the REST API as the signed-in user), `browser` and `page` fixtures
# are in conftest.py.


def _expect():
    from playwright.sync_api import expect

    return expect


def _fill_form(page, *, backend: str, lora_rank: str = "8") -> None:
    page.locator("#new-job-model textarea, #new-job-model input").first.fill("builtin:tiny-llama")
    page.locator("#new-job-dataset textarea, #new-job-dataset input").first.fill(
        "builtin:arithmetic")
    page.locator("#new-job-method").get_by_label("lora", exact=True).check()
    page.locator("#new-job-backend").get_by_label(backend, exact=True).check()
    page.locator("#new-job-num-gpus input").fill("2")
    page.locator("#new-job-max-steps input").fill(str(MAX_STEPS))
    page.locator("#new-job-lora-r input").fill(lora_rank)


def test_a_bad_value_is_refused_with_the_field_named(page, api):
    expect = _expect()
    _fill_form(page, backend="zero2", lora_rank="0")
    expect(page.locator("#new-job-errors")).to_contain_text("LoRA rank (lora.r)")
    page.locator("#new-job-submit").click()
    expect(page.locator("#new-job-result")).to_contain_text("Not submitted")
    expect(page.locator("#new-job-result")).to_contain_text("lora.r")
    assert api.get("/api/jobs").json() == []


def test_the_form_checks_the_data_on_a_worker_and_shows_what_lora_adapts(page, api):
    """Check data (a worker's preflight) and What LoRA adapts (the trainer's own resolution),
    as a person sees them under the form."""
    expect = _expect()
    _fill_form(page, backend="zero2")
    page.locator("#new-job-check-data").click()
    result = page.locator("#new-job-check-data-result")
    # The worker's first preflight imports transformers and builds the tokenizer.
    expect(result).to_contain_text("records", timeout=120_000)
    expect(result).to_contain_text("seq_len")
    expect(result.locator("mark, .trained").first).to_be_visible()
    page.locator("#new-job-lora-targets-button").click()
    targets = page.locator("#new-job-lora-targets")
    expect(targets).to_contain_text("trainable parameters", timeout=120_000)
    expect(targets).to_contain_text("model.layers.*.self_attn.q_proj")
    page.screenshot(path=str(FORM_SCREENSHOT), full_page=True)
    assert api.get("/api/jobs").json() == []  # checking submits nothing


@pytest.mark.torchrun
def test_submit_a_job_and_watch_it_train(page, api):
    expect = _expect()
    _fill_form(page, backend="fsdp")
    expect(page.locator("#new-job-config-title")).to_contain_text("FSDP")
    expect(page.locator("#new-job-config")).to_contain_text('"fully_shard (FSDP2)"')
    page.locator("#new-job-backend").get_by_label("zero2", exact=True).check()
    expect(page.locator("#new-job-config-title")).to_contain_text("DeepSpeed ZeRO-2")
    expect(page.locator("#new-job-config")).to_contain_text('"zero_optimization"')
    expect(page.locator("#new-job-command textarea")).to_have_value(
        re.compile("--nproc_per_node 2 --log-dir .* --tee 3 -m trainer"))
    expect(page.locator("#new-job-errors")).not_to_contain_text("fix")
    # The memory plan is of the cluster that is there: on this host without GPUs, its CPU
    # ranks in RAM, so the GPU memory field changes nothing (tests/app/test_plan_panel.py
    # holds the warning for a card too small; tests/browser/test_plan_panel.py a GPU plan).
    expect(page.locator("#new-job-plan")).to_contain_text("Recommended: zero2")
    expect(page.locator("#new-job-plan")).to_contain_text("CPU ranks")
    page.locator("#new-job-gpu-memory-gb input").fill("1")
    expect(page.locator("#new-job-plan")).to_contain_text("CPU ranks")
    expect(page.locator("#new-job-errors")).not_to_contain_text("will not fit")

    page.locator("#new-job-submit").click()
    expect(page.locator("#new-job-result")).to_contain_text("Submitted job")
    job_id = int(re.search(r"Submitted job (\d+)", page.locator("#new-job-result").inner_text())[1])
    expect(page.locator("#job-id input")).to_have_value(str(job_id))  # the job page opened
    expect(page.locator("#job-status")).to_contain_text(f"Job {job_id}")

    steps_seen = _watch_steps(page, api, job_id)
    assert steps_seen[-1] == MAX_STEPS and max(steps_seen) > min(steps_seen), steps_seen
    final = _wait_for_final_status(api, job_id)
    assert final["status"] == "succeeded", f"job {job_id} {final['status']}: {final['error']}"
    expect(page.locator("#job-status")).to_contain_text("succeeded")

    train = api.get(f"/api/jobs/{job_id}/metrics").json()["train"]
    assert len(train) == MAX_STEPS
    assert line_points(page, "#job-loss-plot") == [MAX_STEPS, MAX_STEPS]  # raw, smoothed
    memory_lines = line_colours(page, "#job-memory-plot")
    assert len(memory_lines) == 2 and None not in memory_lines, memory_lines  # one per rank
    expect(page.locator("#job-downloads a[href$='/artifacts/merged']")).to_be_visible()
    expect(page.locator("#job-memory-comparison")).to_contain_text("Planned for zero2")
    page.screenshot(path=str(SCREENSHOT), full_page=True)


def _watch_steps(page, api: httpx.Client, job_id: int) -> list[int]:
    """The step counts the job page showed, until it showed the last one."""
    seen: list[int] = []
    deadline = time.monotonic() + JOB_SECONDS
    while time.monotonic() < deadline:
        match = re.search(r"step (\d+) /", page.locator("#job-status").inner_text())
        if match and (not seen or int(match[1]) != seen[-1]):
            seen.append(int(match[1]))
        if seen and seen[-1] == MAX_STEPS:
            return seen
        status = api.get(f"/api/jobs/{job_id}").json()
        if status["status"] in ("failed", "cancelled"):
            pytest.fail(f"job {job_id} {status['status']}: {status['error']}")
        time.sleep(0.3)
    pytest.fail(f"job {job_id} did not reach step {MAX_STEPS} in {JOB_SECONDS} s; saw {seen}")


def _wait_for_final_status(api: httpx.Client, job_id: int) -> dict:
    deadline = time.monotonic() + JOB_SECONDS
    while time.monotonic() < deadline:
        job = api.get(f"/api/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    pytest.fail(f"job {job_id} did not finish in {JOB_SECONDS} s after its last step")


def test_clicking_a_job_in_the_table_opens_it(page, api):
    expect = _expect()
    jobs = api.get("/api/jobs").json()
    if not jobs:
        pytest.skip("no job was submitted by the test before")
    page.get_by_role("tab", name="Jobs", exact=True).click()
    name_cell = page.locator("#jobs-table [data-testid=cell-0-2]")  # row 0, column "name"
    expect(name_cell).to_have_text(jobs[0]["name"])
    name_cell.click()
    expect(page.locator("#job-id input")).to_have_value(str(jobs[0]["id"]))
    expect(page.locator("#job-status")).to_contain_text(f"Job {jobs[0]['id']}")


def test_the_page_names_the_signed_in_user_and_signs_out(browser, server):
    from tests.browser.conftest import USER, signed_in_page

    expect = _expect()
    page = signed_in_page(browser, server)
    expect(page.locator("#account")).to_contain_text(f"Signed in as {USER} (user)")
    page.locator("#sign-out").click()
    expect(page.locator("#sign-in")).to_be_visible()
    page.goto(server)  # the session is over: back to the form, not the UI
    expect(page.locator("#sign-in")).to_be_visible()
    page.context.close()


def test_a_wrong_password_keeps_the_ui_closed(browser, server):
    from tests.browser.conftest import USER, VIEWPORT

    expect = _expect()
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(server)
    expect(page).to_have_url(re.compile(r"/login\?next=/"))
    page.locator("#username").fill(USER)
    page.locator("#password").fill("not the password")
    page.locator("#sign-in").click()
    expect(page.locator("#sign-in-error")).to_contain_text("wrong user name or password")
    assert page.locator("#new-job-submit").count() == 0
    context.close()


def test_script_in_a_job_name_is_shown_as_text_never_run(page, api):
    expect = _expect()
    name = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
    response = api.post("/api/jobs", json={"name": name, "max_steps": 1})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    api.post(f"/api/jobs/{job_id}/cancel")  # only its name matters here
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.get_by_role("tab", name="Jobs", exact=True).click()
    expect(page.locator("#jobs-table")).to_contain_text("<img src=x onerror=")
    page.locator("#jobs-table [data-testid=cell-0-2]").click()  # row 0, column "name"
    expect(page.locator("#job-status")).to_contain_text(f"Job {job_id}")
    expect(page.locator("#job-status")).to_contain_text("<script>")
    assert page.evaluate("window.pwned") is None
    assert dialogs == []


def test_a_dataset_uploaded_in_the_form_fills_the_dataset_field(page, tmp_path):
    import json

    from tests.browser.conftest import USER

    expect = _expect()
    good = tmp_path / "my-train.jsonl"
    good.write_text("\n".join(json.dumps({"instruction": f"add {i} and 1", "output": str(i + 1)})
                              for i in range(12)))
    _choose_file(page, good)
    expect(page.locator("#new-job-upload-result")).to_contain_text("12 records")
    dataset = page.locator("#new-job-dataset textarea, #new-job-dataset input").first
    expect(dataset).to_have_value(re.compile(rf"/uploads/{USER}/[0-9a-f]{{12}}-my-train\.jsonl$"))

    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"instruction": not json}\n')
    _choose_file(page, bad)
    expect(page.locator("#new-job-upload-result")).to_contain_text("Upload refused")
    expect(page.locator("#new-job-upload-result")).to_contain_text("broken.jsonl")
    expect(dataset).to_have_value(re.compile(r"my-train\.jsonl$"))  # the good one stays


def _choose_file(page, path) -> None:
    with page.expect_file_chooser() as chooser:
        page.locator("#new-job-dataset-upload").click()
    chooser.value.set_files(str(path))
