"""The New-job form's "Report to": a multiselect of the spec's trackers, reaching the spec."""
from app.ui.build_ui import build_ui
from app.ui.new_job import form_handlers
from tunedeck.spec.fields import TRACKERS
from tunedeck.spec.job_spec import JobSpec


class NoBroker:
    def send_task(self, *args, **kwargs):
        raise AssertionError("nothing is submitted here")


def test_none_by_default_and_the_chosen_trackers_reach_the_spec():
    assert form_handlers.default_form()["report_to"] == [] == JobSpec(max_steps=1).report_to
    for chosen in ([], ["tensorboard"], ["wandb", "mlflow"], list(TRACKERS), None):
        spec, problems = form_handlers.form_to_spec({**form_handlers.default_form(),
                                                     "report_to": chosen})
        assert problems == "" and spec.report_to == list(chosen or [])


def test_a_spec_loaded_into_the_form_keeps_its_trackers():
    spec = JobSpec(max_steps=3, report_to=["mlflow", "tensorboard"])
    form = form_handlers.spec_to_form(spec)
    rebuilt, problems = form_handlers.form_to_spec({**form_handlers.default_form(), **form})
    assert problems == "" and rebuilt.report_to == ["mlflow", "tensorboard"]


def test_the_multiselect_offers_exactly_the_spec_trackers(database):
    blocks = build_ui(database=database, celery_app=NoBroker())
    dropdown, = [block for block in blocks.blocks.values()
                 if getattr(block, "elem_id", None) == "new-job-report-to"]
    assert [value for _label, value in dropdown.choices] == list(TRACKERS)
    assert dropdown.multiselect and dropdown.value == []
