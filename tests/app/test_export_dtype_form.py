"""The New-job form's export dtype: its choices are the spec's, and the choice reaches the spec."""
from app.ui.build_ui import build_ui
from app.ui.new_job import form_handlers
from tunedeck.spec.fields import EXPORT_DTYPES
from tunedeck.spec.job_spec import JobSpec
from tunedeck.spec.text import parse_spec_text


class NoBroker:
    def send_task(self, *args, **kwargs):
        raise AssertionError("nothing is submitted here")


def test_the_form_defaults_to_auto_and_passes_the_choice_to_the_spec():
    assert form_handlers.default_form()["export_dtype"] == "auto" == JobSpec(max_steps=1).export_dtype
    for choice in EXPORT_DTYPES:
        spec, problems = form_handlers.form_to_spec({**form_handlers.default_form(),
                                                     "export_dtype": choice})
        assert problems == "" and spec.export_dtype == choice
    assert EXPORT_DTYPES == ("auto", "bf16", "fp16", "fp32")


def test_the_dropdown_offers_exactly_the_spec_choices(database):
    blocks = build_ui(database=database, celery_app=NoBroker())
    dropdown, = [block for block in blocks.blocks.values()
                 if getattr(block, "elem_id", None) == "new-job-export-dtype"]
    assert [value for _label, value in dropdown.choices] == list(EXPORT_DTYPES)
    assert dropdown.value == "auto"


def test_a_yaml_spec_takes_it_and_refuses_an_unknown_dtype():
    assert parse_spec_text("max_steps: 2\nexport_dtype: fp16\n").export_dtype == "fp16"
    try:
        parse_spec_text("max_steps: 2\nexport_dtype: int8\n")
    except ValueError as error:
        assert "export_dtype" in str(error)
    else:
        raise AssertionError("int8 accepted")
