"""Issue 30: a spec field's words live in the spec. Each field carries its label (`title`)
and its help (`description`); the New job form's labels, the API schema and the reference
page read them from there."""
from __future__ import annotations

import gradio as gr

from app.ui.build_ui import build_ui
from app.ui.new_job.form_layout import FORM_ONLY_LABELS, SPEC_FORM_FIELDS, spec_location
from tests.app.test_ui_handlers import RecordingCelery
from tunedeck.spec.job_spec import JobSpec, spec_field
from tunedeck.settings import Settings


def _locations(model: type, prefix: str = "") -> list[str]:
    found = []
    for name, field in model.model_fields.items():
        found.append(prefix + name)
        if isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields"):
            found += _locations(field.annotation, f"{prefix}{name}.")
    return found


def test_every_spec_field_carries_its_label_and_help():
    locations = _locations(JobSpec)
    assert "lora.r" in locations and "fsdp.compile" in locations and len(locations) > 60
    missing = [location for location in locations
               if not (spec_field(location).title and spec_field(location).description)]
    assert missing == []


def test_the_api_schema_and_the_form_show_the_specs_own_words(database, tmp_path):
    schema = JobSpec.model_json_schema()
    rank = spec_field("lora.r")
    assert schema["$defs"]["LoraSettings"]["properties"]["r"]["title"] == rank.title
    assert schema["properties"]["learning_rate"]["description"] == \
        spec_field("learning_rate").description

    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    labels = {block.elem_id: block.label for block in blocks.blocks.values()
              if isinstance(block, gr.components.Component) and block.elem_id}
    shown = {name: labels[f"new-job-{name.replace('_', '-')}"] for name in SPEC_FORM_FIELDS
             if f"new-job-{name.replace('_', '-')}" in labels and name not in FORM_ONLY_LABELS}
    assert len(shown) > 40, sorted(labels)
    assert shown == {name: spec_field(spec_location(name)).title for name in shown}
