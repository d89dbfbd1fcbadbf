"""The New job form's "Check data" handler, called directly with a real SQLite database,
a recording broker, and the worker's own preflight function serving the stored request."""
from __future__ import annotations

import json

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.build_ui import build_ui
from app.ui.new_job import form_handlers
from app.ui.new_job.preflight_handlers import check_form_data, poll_data_check
from tests.app.test_ui_handlers import RecordingCelery
from tests.trainer.conftest import builtin_model_dir, tunedeck_home  # noqa: F401 (fixtures)
from tunedeck.services.broker import PREFLIGHT_DATASET_TASK
from tunedeck.settings import Settings
from worker.dataset_preflight import run_dataset_preflight


def check(form_changes: dict, pending, *, database, settings, celery) -> tuple[str, dict | None]:
    form = {**form_handlers.default_form(), **form_changes}
    return check_form_data(form, pending, database=database, celery_app=celery,
                           settings=settings, principal=OPEN_PRINCIPAL, wait_seconds=0)


def test_check_data_sends_the_form_data_fields_and_shows_the_marked_report(
        database, tmp_path, builtin_model_dir):  # noqa: F811
    settings, celery = Settings(home=tmp_path / "home"), RecordingCelery()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"question": f"{n} + 1 <b>?</b>", "answer": str(n + 1)})
                            + "\n" for n in range(8)))
    form = {"dataset": str(data), "seq_len": 64, "columns_prompt": "question",
            "columns_response": "answer"}
    shown, pending = check(form, None, database=database, settings=settings, celery=celery)
    assert "Data check 1 is pending" in shown and "no live worker" in shown
    assert pending["id"] == 1 and pending["request"]["columns"]["prompt"] == "question"
    assert celery.sent == [(PREFLIGHT_DATASET_TASK, [1], {"queue": "tunedeck.queue.default"})]

    polled, still = poll_data_check(pending, database=database, settings=settings,
                                    principal=OPEN_PRINCIPAL)
    assert "Data check 1 is pending" in polled and still == pending  # the page polls on
    assert run_dataset_preflight(1, settings=settings, database=database,
                                 worker_name="w1") == "done"
    polled, still = poll_data_check(pending, database=database, settings=settings,
                                    principal=OPEN_PRINCIPAL)
    assert still is None and "8 records; all tokenized" in polled  # ... until the report is in
    # The same form again: the running check is read back, not started anew.
    shown, pending = check(form, pending, database=database, settings=settings, celery=celery)
    assert pending is None and len(celery.sent) == 1
    assert shown.startswith('<div id="preflight-report">') and "Data check 1" in shown
    assert "8 records; all tokenized" in shown and "0 (0.0%) lose answer tokens" in shown
    assert "<mark>1" in shown  # record 1's answer, highlighted
    assert "&lt;b&gt;?&lt;/b&gt;" in shown and "<b>?</b>" not in shown  # the data is escaped
    assert "<table><caption>prompt + answer tokens" in shown


def test_check_data_names_bad_fields_and_refused_paths_and_sends_nothing(database, tmp_path):
    settings, celery = Settings(home=tmp_path / "home"), RecordingCelery()
    shown, pending = check({"seq_len": None}, None, database=database, settings=settings,
                           celery=celery)
    assert "Not checked. Please fix:" in shown and "Sequence length (seq_len)" in shown
    shown, pending = check({"dataset": "/srv/elsewhere/train.jsonl"}, None, database=database,
                           settings=settings, celery=celery)
    assert "Not checked:" in shown and "outside the allowed folders" in shown
    assert pending is None and celery.sent == []


def test_the_new_job_tab_has_the_check_data_button_and_panel(database, tmp_path):
    blocks = build_ui(database=database, celery_app=RecordingCelery(),
                      settings=Settings(home=tmp_path / "home"))
    ids = {block.elem_id for block in blocks.blocks.values()}
    assert {"new-job-check-data", "new-job-check-data-result"} <= ids


class UnreachableBroker:
    def send_task(self, *_arguments, **_options):
        raise ConnectionError("broker down")


def test_a_preflight_the_broker_refuses_fails_at_once_saying_so(database, tmp_path):
    shown, pending = check({}, None, database=database, settings=Settings(home=tmp_path / "home"),
                           celery=UnreachableBroker())
    assert "Data check 1 failed:" in shown and "the broker could not be reached" in shown
    assert pending is None


def test_the_histogram_shows_every_bin_to_seq_len_and_over_it_only_what_is_used():
    from app.ui.new_job.preflight_handlers import histogram_html
    from trainer.data.preflight_figures import length_histogram

    inside = histogram_html(length_histogram([10, 20, 30], seq_len=256))
    assert inside.count("<tr><td>") == 8 and "225-256" in inside and ">= 481" not in inside
    over = histogram_html(length_histogram([10, 300], seq_len=256))
    assert over.count("<tr><td>") == 10 and "289-320" in over and "321-352" not in over
