"""Objective DPO from the New job form: the Objective choice beside Method shows the
preference settings and the pairs' columns, picking it swaps the built-in dataset for the
preference one (and turns packing off); the form builds a DPO spec, and a clean SFT one once
switched back; a DPO spec loads back into the form."""
from __future__ import annotations

import json

import gradio as gr

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.build_ui import build_ui
from app.ui.new_job import form_handlers, option_visibility
from app.ui.new_job.form_layout import OTHER_OPTIONS
from app.ui.new_job.option_visibility import COLUMN_ROLES
from app.ui.new_job.preset_handlers import fields_the_form_lacks
from tests.app.test_ui_handlers import RecordingCelery
from tunedeck.jobs import queries as job_queries
from tunedeck.spec.job_spec import JobSpec, spec_field
from tunedeck.settings import Settings

DPO_FIELDS = ("dpo_beta", "dpo_loss", "dpo_label_smoothing", "dpo_reference", "dpo_sft_weight",
              "dpo_simpo_gamma")


def picked(form: dict, objective: str) -> dict:
    """The form after a user picks `objective`, as the tab applies it."""
    switch = option_visibility.objective_picked(objective, form["dataset"], form["packing"],
                                            form["padding_free"])
    changes = {name: value for name, value in (("dataset", switch.dataset),
                                               ("packing", switch.packing),
                                               ("padding_free", switch.padding_free))
               if value is not None}
    return {**form, "objective": objective, **changes}


def test_picking_dpo_builds_a_valid_dpo_spec_and_sft_again_a_clean_sft_one():
    start = {**form_handlers.default_form(), "packing": True, "columns_response": "answer"}
    dpo = picked(start, "dpo")
    assert dpo["dataset"] == "builtin:arithmetic-preference"
    assert (dpo["packing"], dpo["padding_free"]) == (False, False)
    dpo.update(dpo_beta=0.2, dpo_loss="ipo", dpo_reference="precomputed", dpo_sft_weight="0.5",
               columns_chosen="better", columns_rejected="worse", columns_prompt="question")
    spec, problems = form_handlers.form_to_spec(dpo)
    assert problems == ""
    assert spec.objective == "dpo" and spec.dataset == "builtin:arithmetic-preference"
    assert spec.dpo.model_dump() == {"beta": 0.2, "loss": "ipo", "label_smoothing": 0.0,
                                     "reference": "precomputed", "sft_weight": 0.5,
                                     "simpo_gamma": 0.5}
    # The response column is sft's (hidden for dpo): not sent, so it refuses nothing.
    assert spec.columns.model_dump() == {"prompt": "question", "response": None,
                                         "messages": None, "system": None,
                                         "chosen": "better", "rejected": "worse"}
    assert not spec.packing and not spec.padding_free

    sft = picked(dpo, "sft")
    assert sft["dataset"] == "builtin:arithmetic"
    spec, problems = form_handlers.form_to_spec(sft)
    assert problems == ""
    # The hidden DPO settings and pair columns are left behind: a plain SFT spec.
    assert spec.objective == "sft" and spec.dpo == JobSpec.model_fields["dpo"].default
    assert (spec.columns.chosen, spec.columns.rejected) == (None, None)
    assert spec.columns.response == "answer" and spec.columns.prompt == "question"
    expected = form_handlers.form_to_spec({**start, "columns_prompt": "question"})[0]
    assert spec.model_dump() == {**expected.model_dump(), "packing": False}


def test_a_named_dataset_stays_and_sft_turns_nothing_off():
    form = {**form_handlers.default_form(), "dataset": "trl-lib/ultrafeedback_binarized"}
    assert option_visibility.objective_picked("dpo", form["dataset"], False, False) == \
        option_visibility.ObjectiveSwitch()
    assert option_visibility.objective_picked("sft", "org/pairs", True, True) == \
        option_visibility.ObjectiveSwitch()
    assert option_visibility.objective_picked("dpo", " builtin:arithmetic ", False, True) == \
        option_visibility.ObjectiveSwitch("builtin:arithmetic-preference", None, False)


def test_a_dpo_spec_loads_back_into_the_form_whole():
    spec = JobSpec(max_steps=5, objective="dpo", dataset="builtin:arithmetic-preference",
                   columns={"prompt": "q", "chosen": "good", "rejected": "bad"},
                   dpo={"beta": 0.3, "loss": "sigmoid", "label_smoothing": 0.1,
                        "reference": "precomputed", "simpo_gamma": 0.7})
    form = form_handlers.spec_to_form(spec)
    assert (form["objective"], form["dpo_beta"], form["dpo_label_smoothing"]) == ("dpo", 0.3, 0.1)
    assert (form["dpo_sft_weight"], form["columns_chosen"]) == ("", "good")
    assert form_handlers.form_to_spec({**form, "gpu_memory_gb": 80})[0] == spec
    assert fields_the_form_lacks(spec) == []
    orpo = spec.model_copy(update={"dpo": spec.dpo.model_copy(update={
        "loss": "orpo", "label_smoothing": 0.0, "reference": "auto", "sft_weight": 2.0})})
    assert form_handlers.spec_to_form(orpo)["dpo_sft_weight"] == "2"
    assert fields_the_form_lacks(orpo) == []


def test_a_broken_dpo_rule_is_marked_under_its_field():
    dpo = picked(form_handlers.default_form(), "dpo")
    cases = [({"dpo_loss": "ipo", "dpo_label_smoothing": 0.1}, "dpo_label_smoothing",
              "label_smoothing applies to loss sigmoid only"),
             ({"dpo_loss": "simpo", "dpo_reference": "precomputed"}, "dpo_reference",
              "loss simpo has no reference model"),
             ({"packing": True}, "packing", "objective dpo lays each answer of a pair"),
             ({"dpo_beta": 0}, "dpo_beta", "greater than 0"),
             ({"dpo_sft_weight": "lots"}, "dpo_sft_weight", "valid number")]
    for changes, field, words in cases:
        shown = form_handlers.preview_form({**dpo, **changes}, principal=OPEN_PRINCIPAL,
                                           settings=Settings())
        assert not shown.valid and words in shown.field_errors.get(field, ""), (changes,
                                                                                 shown.message)
        assert words in shown.message  # and listed beside the preview


def test_the_trainer_preview_leads_with_the_objective():
    preview = form_handlers.preview_form(picked(form_handlers.default_form(), "dpo"),
                                         principal=OPEN_PRINCIPAL, settings=Settings())
    trainer = json.loads(preview.trainer_json)
    assert list(trainer)[:2] == ["objective", "dpo"] and trainer["objective"] == "dpo"
    # What the loss reads, the SFT term's weight resolved (unset: 0 for sigmoid).
    assert trainer["dpo"] == {"beta": 0.1, "loss": "sigmoid", "label_smoothing": 0.0,
                              "reference": "auto", "sft_weight": 0.0}
    sft = json.loads(form_handlers.preview_form(form_handlers.default_form(),
                                                principal=OPEN_PRINCIPAL,
                                                settings=Settings()).trainer_json)
    assert sft["objective"] == "sft" and "dpo" not in sft


def test_the_objective_shows_its_options_and_columns():
    groups = ("dpo", "grpo", *COLUMN_ROLES)
    shown = dict(zip(groups, option_visibility.objective_options_visible("dpo")))
    assert shown == {"dpo": True, "grpo": False, "prompt": True, "response": False,
                     "messages": False, "system": True, "chosen": True, "rejected": True}
    shown = dict(zip(groups, option_visibility.objective_options_visible("sft")))
    assert shown == {"dpo": False, "grpo": False, "prompt": True, "response": True,
                     "messages": True, "system": True, "chosen": False, "rejected": False}
    shown = dict(zip(groups, option_visibility.objective_options_visible("grpo")))
    assert shown == {"dpo": False, "grpo": True, "prompt": True, "response": False,
                     "messages": True, "system": True, "chosen": False, "rejected": False}


def test_submit_stores_a_dpo_job(database):
    celery = RecordingCelery()
    job_id, message = form_handlers.submit_form(
        picked(form_handlers.default_form(), "dpo"), database=database, celery_app=celery,
        principal=OPEN_PRINCIPAL, settings=Settings())
    assert job_id is not None and "Submitted job" in message, message
    with database.transaction() as session:
        stored = JobSpec.model_validate(job_queries.get_job(session=session,
                                                            job_id=job_id).spec)
    assert stored.objective == "dpo" and stored.dataset == "builtin:arithmetic-preference"


def test_the_objective_sits_beside_method_with_its_settings_in_the_specs_words(database,
                                                                              tmp_path):
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    by_id = {block.elem_id: block for block in blocks.blocks.values() if block.elem_id}
    objective, method = by_id["new-job-objective"], by_id["new-job-method"]

    def inside(block, ancestor) -> bool:
        while block is not None and block is not ancestor:
            block = block.parent
        return block is ancestor

    # One box with Method (a row above it: four radios do not fit one row).
    box = by_id["new-job-objective-and-method"]
    assert isinstance(objective, gr.Radio) and inside(objective, box) and inside(method, box)
    assert objective.choices == [("SFT", "sft"), ("DPO", "dpo"), ("GRPO", "grpo")] \
        and objective.value == "sft"
    assert (objective.label, objective.info) == (spec_field("objective").title,
                                                 spec_field("objective").description)
    assert "objective" not in OTHER_OPTIONS  # not in "Other options"
    group = by_id["new-job-dpo-options"]
    assert isinstance(group, gr.Group) and group.visible is False
    for name in DPO_FIELDS:
        block = by_id[f"new-job-{name.replace('_', '-')}"]
        location = name.replace("_", ".", 1)
        assert (block.label, block.info) == (spec_field(location).title,
                                             spec_field(location).description)
        assert inside(block, group), name
    for role, visible in (("chosen", False), ("rejected", False), ("response", True)):
        picker = by_id[f"new-job-columns-{role}"]
        assert picker.visible is visible and picker.parent is by_id["new-job-columns-prompt"].parent


def test_the_plans_reference_precomputed_advice_applies_to_the_form():
    from app.ui.new_job.plan_handlers import apply_setup, missing_fields

    form = picked({**form_handlers.default_form(), "method": "full"}, "dpo")
    setup = {"label": "reference precomputed", "spec_changes": {"dpo.reference": "precomputed"}}
    assert missing_fields(form, setup) == []
    applied = {**form, **apply_setup(form, setup)}
    assert form_handlers.form_to_spec(applied)[0].dpo.reference == "precomputed"
