"""The New job form in a browser, on this CPU-only host's `tunedeck up` (its worker
registers with no GPU): a choice the host cannot run is marked beside its field; a dataset
uploaded beside its field fills it, and its columns fill the column pickers."""
from __future__ import annotations

import re

import pytest

from tests.browser.conftest import SCREEN_VIEWPORT as VIEWPORT, SCREENS, signed_in_page

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]
FIELD_INPUT = "#new-job-{} input, #new-job-{} textarea"


def field_input(page, name: str):
    return page.locator(FIELD_INPUT.format(name, name)).first

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


def test_a_csv_uploaded_beside_the_dataset_field_fills_it_and_the_column_pickers(
        browser, tunedeck_server, tmp_path):
    from playwright.sync_api import expect

    from tests.browser.conftest import USER

    data = tmp_path / "Quiz Set (v2).csv"
    data.write_text("question,answer\n" + "".join(f"add {i} and 1,{i + 1}\n" for i in range(8)))
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        button, dataset = page.locator("#new-job-dataset-upload"), field_input(page, "dataset")
        # Beside the field it fills: just below it, not at the foot of the form.
        gap = button.bounding_box()["y"] - page.locator("#new-job-dataset").bounding_box()["y"]
        assert 0 < gap < 200, gap
        with page.expect_file_chooser() as chooser:
            button.click()
        chooser.value.set_files(str(data))
        result = page.locator("#new-job-upload-result")
        expect(result).to_contain_text("8 records")
        expect(result).to_contain_text("as Quiz-Set-v2.csv")
        expect(dataset).to_have_value(
            re.compile(rf"/uploads/{USER}/[0-9a-f]{{12}}-Quiz-Set-v2\.csv$"))
        expect(field_input(page, "columns-prompt")).to_be_visible()
        expect(field_input(page, "columns-prompt")).to_have_value("question")
        expect(field_input(page, "columns-response")).to_have_value("answer")
        expect(page.locator("#new-job-dataset")).not_to_have_class(re.compile(r"\bfield-error\b"))
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "new-job-upload-columns.png"), full_page=True)
    finally:
        page.context.close()


def test_a_bad_model_folder_and_unmapped_dataset_columns_are_marked_as_typed(
        browser, tunedeck_server, tmp_path):
    from playwright.sync_api import expect

    not_a_model = tmp_path / "not-a-model"  # inside the allowed folders, without config.json
    not_a_model.mkdir()
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(f'{{"question": "add {i} and 1", "answer": "{i + 1}"}}\n'
                            for i in range(4)))
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        model_field, dataset_field = page.locator("#new-job-model"), page.locator("#new-job-dataset")
        field_input(page, "model").fill(str(not_a_model))
        expect(model_field).to_have_class(re.compile(r"\bfield-error\b"))
        expect(model_field).to_contain_text("no config.json in this folder")
        field_input(page, "model").fill("/etc/ssl")
        expect(model_field).to_contain_text("outside the allowed folders")
        field_input(page, "dataset").fill(str(data))
        expect(dataset_field).to_have_class(re.compile(r"\bfield-error\b"))
        expect(dataset_field).to_contain_text(
            "likely columns: {prompt: question, response: answer}")
        expect(dataset_field).to_contain_text("the column pickers")
        expect(field_input(page, "columns-prompt")).to_be_visible()  # opened for the fix
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "new-job-inputs-marked.png"), full_page=True)
        for role, column in (("prompt", "question"), ("response", "answer")):
            field_input(page, f"columns-{role}").click()
            # The picker's own list: the other picker's may still be closing (two visible).
            page.locator(f"#new-job-columns-{role}").get_by_role(
                "option", name=column, exact=True).click()
            expect(field_input(page, f"columns-{role}")).to_have_value(column)
        expect(dataset_field).not_to_have_class(re.compile(r"\bfield-error\b"))
        field_input(page, "model").fill("builtin:tiny-llama")
        expect(model_field).not_to_have_class(re.compile(r"\bfield-error\b"))
        expect(page.locator("#new-job-result")).to_have_text("")  # nothing was submitted
    finally:
        page.context.close()


# Each line's gutter number top minus its line's top, in a code preview (0: aligned).
GUTTER_DRIFT_JS = """(id) => {
  const root = document.getElementById(id);
  const lines = [...root.querySelectorAll('.cm-content .cm-line')];
  const numbers = [...root.querySelectorAll('.cm-lineNumbers .cm-gutterElement')]
    .filter(node => node.style.visibility !== 'hidden');
  return lines.map((line, i) => Math.round(numbers[i].getBoundingClientRect().top
                                           - line.getBoundingClientRect().top));
}"""


def test_the_form_follows_its_model_and_draws_its_options_plainly(
        browser, tunedeck_server, tmp_path_factory):
    """Issue 29: the expert options only for a mixture-of-experts model, "What LoRA adapts"
    answered again for a new model, radio options on one line, the previews' line numbers
    beside their lines before anything scrolled, the column pickers' empty choice in words,
    and the Report-to hint's names as written."""
    from playwright.sync_api import expect

    from tests.trainer.model_families import family_config

    mixtral = tmp_path_factory.mktemp("form-moe") / "tiny-mixtral"  # under the allowed root
    family_config("mixtral").save_pretrained(mixtral)
    page = signed_in_page(browser, tunedeck_server.base_url, viewport=VIEWPORT)
    try:
        # Drawn below the fold: CodeMirror had not measured it, its numbers drifted.
        page.locator("#new-job-trainer-settings .cm-line").first.wait_for()
        drift = page.evaluate(GUTTER_DRIFT_JS, "new-job-trainer-settings")
        assert len(drift) > 10 and set(drift) == {0}, drift
        for group in ("#new-job-method", "#new-job-backend", "#new-job-precision"):
            tops = page.locator(f"{group} label").evaluate_all(
                "labels => labels.map(label => Math.round(label.getBoundingClientRect().top))")
            assert len(set(tops)) == 1, (group, tops)  # "full" and "fp32" went under the rest
        SCREENS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENS / "new-job-first-render.png"), full_page=True)

        experts, router = page.locator("#new-job-lora-experts"), page.locator(
            "#new-job-lora-train-router")
        answer = page.locator("#new-job-lora-targets")
        expect(experts).to_be_hidden()  # the built-in model is dense
        expect(router).to_be_hidden()
        page.locator("#new-job-lora-targets-button").click()
        expect(answer).to_contain_text("LlamaForCausalLM", timeout=180_000)  # the imports
        model = page.locator("#new-job-model textarea, #new-job-model input").first
        model.fill(str(mixtral))
        expect(experts).to_be_visible()
        expect(experts.locator("input")).to_be_checked()
        expect(router).to_be_visible()
        expect(answer).to_contain_text("MixtralForCausalLM")
        expect(answer).to_contain_text("mlp.experts.gate_up_proj")
        page.locator("#new-job-lora-options").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENS / "new-job-moe-model.png"))
        model.fill("")
        expect(answer).to_contain_text("Pick a model to see what LoRA adapts")
        model.fill("builtin:tiny-llama")
        expect(answer).to_contain_text("LlamaForCausalLM")
        expect(answer).not_to_contain_text("Mixtral")
        expect(experts).to_be_hidden()
        expect(router).to_be_hidden()

        page.locator("#new-job-dataset-options").get_by_text("Dataset config, split").click()
        prompt = page.locator("#new-job-columns-prompt input")
        expect(prompt).to_have_value("(usual names)")
        prompt.click()
        choices = page.get_by_role("option").evaluate_all(
            "options => options.map(option => option.textContent.trim())")
        assert choices == ["✓ (usual names)"], choices
        prompt.press("Escape")
        expect(page.locator("#new-job-columns-system input")).to_have_value("(none)")
        page.locator("#new-job-more-options").get_by_text("Evaluation, packing").click()
        hint = page.locator("#new-job-report-to .info-text")
        expect(hint).to_contain_text("WANDB_API_KEY")
        expect(hint).to_contain_text("TUNEDECK_MLFLOW_TRACKING_URI")
        assert "<em>" not in hint.evaluate("node => node.innerHTML")
        page.screenshot(path=str(SCREENS / "new-job-columns-and-trackers.png"), full_page=True)

        # A spec field the form lays out nowhere by hand (tags) is in "Other options", made
        # from its type, and a bad value is marked under it as any other field's.
        page.locator("#new-job-other-options").get_by_text("Other options").click()
        tags = field_input(page, "tags")
        expect(page.locator("#new-job-tags")).to_contain_text("shown in the jobs list")
        tags.fill("baseline, two words")
        expect(page.locator("#new-job-tags .info-text")).to_contain_text(
            "'two words' is not a tag")
        page.locator("#new-job-other-options").scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENS / "new-job-other-options.png"))
        tags.fill("baseline, qwen:0.5b")
        expect(page.locator("#new-job-tags .info-text")).not_to_contain_text("not a tag")
    finally:
        page.context.close()
