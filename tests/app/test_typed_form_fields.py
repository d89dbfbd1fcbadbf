"""A spec field needs no form edit: every spec field is an input of the New job form (placed
by a line of the layout table, or made from its type in "Other options") or named in
LEFT_OUT, and a field made from its type round-trips form -> spec -> form. The demo field is
`tags`, shown in the Jobs table, on the job page and in the API's job rows."""
from __future__ import annotations

from typing import Literal

import gradio as gr
import pytest
from pydantic import BaseModel, Field

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.build_ui import build_ui
from app.ui.job_page import job_handlers
from app.ui.jobs.jobs_table import jobs_table
from app.ui.new_job import form_handlers
from app.ui.new_job.form_layout import (AREAS, FORM_FIELDS, FORM_PLACES, LEFT_OUT,
                                        OTHER_OPTIONS, PLACES, spec_location)
from app.ui.new_job.typed_fields import typed_field
from tests.app.test_field_words import _locations
from tests.app.test_ui_handlers import RecordingCelery
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec, spec_field
from tunedeck.settings import Settings


def test_every_spec_field_is_in_the_form_or_left_out_by_name():
    shown = {spec_location(name) for name in FORM_FIELDS}
    sections = {name for name, field in JobSpec.model_fields.items()
                if hasattr(field.annotation, "model_fields")}
    leaves = [location for location in _locations(JobSpec) if location not in sections]
    missing = [location for location in leaves if location not in shown | set(LEFT_OUT)]
    assert missing == [], ("give each its line in app/ui/new_job/form_layout.py's PLACES, or "
                           "name it in form_layout.LEFT_OUT")
    # Nothing is both, and LEFT_OUT names only what the spec has.
    assert set(LEFT_OUT) & shown == set() and set(LEFT_OUT) <= set(leaves)
    # A field the table places is not made again from its type.
    laid_out = {place.key for place in PLACES}
    assert set(OTHER_OPTIONS) & laid_out == set() and "tags" in OTHER_OPTIONS
    assert len(FORM_FIELDS) == len(set(FORM_FIELDS))  # one input a field
    # Each in an area the tab lays out.
    assert {place.area for place in FORM_PLACES} <= set(AREAS)


def test_a_field_made_from_its_type_is_in_the_other_options_with_the_specs_words(database,
                                                                                 tmp_path):
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    by_id = {block.elem_id: block for block in blocks.blocks.values() if block.elem_id}
    tags = by_id["new-job-tags"]
    assert isinstance(tags, gr.Textbox)
    assert (tags.label, tags.info) == ("Tags", spec_field("tags").description)
    other = by_id["new-job-other-options"]
    assert isinstance(other, gr.Accordion) and other.open is False

    def inside(block, ancestor) -> bool:
        while block is not None:
            if block is ancestor:
                return True
            block = block.parent
        return False

    assert inside(tags, other)
    # The hand-laid fields keep their places (and ids) outside it.
    assert not inside(by_id["new-job-seed"], other)


def test_a_typed_field_round_trips_form_to_spec_to_form():
    spec = JobSpec(max_steps=5, tags=["baseline", "qwen:0.5b", "run_2"])
    form = form_handlers.spec_to_form(spec)
    assert form["tags"] == "baseline, qwen:0.5b, run_2"
    assert form_handlers.form_to_spec({**form, "gpu_memory_gb": 80})[0] == spec
    # Spaces around items and empty items are dropped; an emptied box is no tags.
    typed = {**form, "tags": " a ,, b ", "gpu_memory_gb": 80}
    assert form_handlers.form_to_spec(typed)[0].tags == ["a", "b"]
    assert form_handlers.form_to_spec({**typed, "tags": ""})[0].tags == []
    assert form_handlers.default_form()["tags"] == ""


def test_a_bad_tag_is_marked_under_the_tags_field():
    form = {**form_handlers.default_form(), "tags": "ok, not ok"}
    spec, problems = form_handlers.form_to_spec(form)
    assert spec is None and problems.startswith("Tags (tags): 'not ok' is not a tag")
    shown = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings())
    assert not shown.valid and "not a tag" in shown.field_errors["tags"]


class _Made(BaseModel):
    flag: bool = False
    count: int = 3
    rate: float = 0.5
    limit: int | None = None
    kind: Literal["a", "b"] = "a"
    kinds: list[Literal["x", "y"]] = Field(default_factory=list)
    text: str = "t"
    note: str | None = None
    labels: list[str] = Field(default_factory=list)
    either: Literal["all"] | list[str] = "all"
    maybe: Literal["p", "q"] | None = None


@pytest.mark.parametrize("name, kind, form_value, spec_value", [
    ("flag", "checkbox", True, True),
    ("count", "integer", 7, 7),
    ("rate", "number", 0.25, 0.25),
    ("limit", "optional_number", "12", 12),
    ("limit", "optional_number", "", None),
    ("kind", "choice", "b", "b"),
    ("kinds", "choices", ["y"], ["y"]),
    ("text", "text", "hello", "hello"),
    ("note", "optional_text", "", None),
    ("labels", "text_list", "p, q", ["p", "q"]),
    ("maybe", "optional_choice", "q", "q"),
    ("maybe", "optional_choice", "unset", None),
])
def test_each_type_takes_its_input_and_gives_its_value_back(name, kind, form_value, spec_value):
    made = typed_field(name, _Made.model_fields[name])
    assert made.kind == kind
    assert made.to_spec(form_value) == spec_value
    assert made.to_spec(made.to_form(spec_value)) == spec_value


def test_the_tables_value_rules_read_an_emptied_input():
    """What the layout table says beyond the types: an emptied split or count is its default,
    a training length of 0 is unset, FSDP's compute dtype "same as precision" is unset."""
    form = {**form_handlers.default_form(), "dataset_split": " ", "eval_split": None,
            "checkpoint_every_steps": None, "fsdp_param_dtype": "same as precision"}
    spec, problems = form_handlers.form_to_spec(form)
    assert problems == "" and (spec.dataset_split, spec.eval_split) == ("train", 0.0)
    assert spec.checkpoint_every_steps == 0 and spec.fsdp.param_dtype is None
    assert form_handlers.form_to_spec({**form, "max_steps": 0, "epochs": "1.5"})[0].epochs == 1.5
    assert form_handlers.form_to_spec({**form, "epochs": "0"})[0].epochs is None
    _spec, problems = form_handlers.form_to_spec({**form, "max_steps": 0})
    assert "set max_steps or epochs" in problems


def test_a_type_with_no_plain_input_makes_none_and_is_left_out_by_name():
    assert typed_field("either", _Made.model_fields["either"]) is None
    assert typed_field("lora", JobSpec.model_fields["lora"]) is None
    assert typed_field("rate", _Made.model_fields["rate"]).to_spec("x") == "x"  # refused by name
    assert typed_field("limit", _Made.model_fields["limit"]).to_spec("two") == "two"


def test_tags_show_in_the_jobs_table_the_job_page_and_the_api_rows(client):
    database = client.app_state.database
    with database.transaction() as session:
        tagged = job_store.create_job(session=session, spec=JobSpec(
            name="run-7", max_steps=1, tags=["baseline", "qwen"])).id
        plain = job_store.create_job(session=session, spec=JobSpec(name="run-8",
                                                                   max_steps=1)).id
    table = jobs_table(database=database, principal=OPEN_PRINCIPAL)
    assert list(table["name"]) == ["run-8", "run-7 #baseline #qwen"]
    page = job_handlers.load_job_page(tagged, database=database, principal=OPEN_PRINCIPAL)
    assert '<span id="job-tags">Tags: `baseline` `qwen`</span>' in page.headline
    assert "job-tags" not in job_handlers.load_job_page(plain, database=database,
                                                        principal=OPEN_PRINCIPAL).headline
    rows = {row["id"]: row for row in client.get("/api/jobs").json()}
    assert rows[tagged]["tags"] == ["baseline", "qwen"] and rows[plain]["tags"] == []
    assert client.get(f"/api/jobs/{tagged}").json()["tags"] == ["baseline", "qwen"]
    refused = client.post("/api/jobs", json={"max_steps": 1, "tags": ["a b"]})
    assert refused.status_code == 422
    assert ["body", "tags"] in [problem["loc"] for problem in refused.json()["detail"]]
