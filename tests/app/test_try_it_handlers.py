"""The job page's "Try it" handler (app/ui/job_page/try_it.py): plain values in, the
answers' HTML out, through the same action as the REST route, with the worker's own
function answering in a thread (as the worker's spare Celery thread would)."""
from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from app.auth.principal import OPEN_PRINCIPAL
from app.main import create_app
from app.ui.job_page import try_it
from tests.app.test_generate_api import WORKER, finished_job, heartbeat
from tests.trainer.conftest import builtin_model_dir, tunedeck_home  # noqa: F401 (fixtures)
from tunedeck.db.request_rows import JobGeneration
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings
from worker.generation import WarmGenerator, run_generation



@pytest.fixture
def client(tmp_path):
    """The app in-process; a handler waits up to 50 s for an answer (a first load takes a few)."""
    settings = Settings(home=tmp_path, generation_wait_seconds=50)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    with TestClient(app) as client:
        client.app_state = app.state
        yield client


def ask(client, job_id, prompt="What is 2 plus 3?", variant="merged", max_new_tokens=6,
        compare=False):
    state = client.app_state
    return try_it.try_prompt(job_id, prompt, variant, max_new_tokens, 0, 0.9, compare,
                             database=state.database, celery_app=state.celery_app,
                             settings=state.settings, principal=OPEN_PRINCIPAL)


@pytest.fixture
def serving_worker(client):
    """Worker w1, live, answering every pending generation until the test ends."""
    heartbeat(client)
    state, stop = client.app_state, threading.Event()
    generator = WarmGenerator(settings=state.settings)

    def serve() -> None:
        while not stop.wait(0.05):
            with state.database.transaction() as session:
                pending = [row.id for row in session.query(JobGeneration).filter_by(status="pending")]
            for generation_id in pending:
                run_generation(generation_id, settings=state.settings, database=state.database,
                               identity=WORKER, generator=generator)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()
    generator.stop()


def test_refusals_are_said_in_the_panel(client, builtin_model_dir):  # noqa: F811
    assert "Pick a job first." in ask(client, None).tuned_html
    job_id = finished_job(client, merged_from=builtin_model_dir)
    assert "prompt: an empty message: write a prompt" in ask(client, job_id, "   ").tuned_html
    over = ask(client, job_id, max_new_tokens=5000).tuned_html
    assert "max_new_tokens 5000: at most 1024" in over
    failed = finished_job(client, "failed")
    assert f"job {failed} is failed: only a succeeded job" in ask(client, failed).tuned_html
    assert "job 999 does not exist" in ask(client, 999).tuned_html


def test_an_answer_and_the_base_beside_it(client, builtin_model_dir, serving_worker):  # noqa: F811
    job_id = finished_job(client, merged_from=builtin_model_dir)
    answers = ask(client, job_id, compare=True)
    assert answers.compared
    assert 'data-variant="merged" data-status="done"' in answers.tuned_html
    assert 'data-variant="base" data-status="done"' in answers.base_html
    assert "6 tokens in" in answers.tuned_html and "on cpu (model loaded in" in answers.tuned_html
    # The merged folder here is a copy of the base: the same greedy text from both.
    text = answers.tuned_html.split('<pre class="try-it-text">')[1].split("</pre>")[0]
    assert text in answers.base_html
    alone = ask(client, job_id)
    assert not alone.compared and "model loaded" not in alone.tuned_html  # warm now


def test_without_its_worker_the_panel_says_what_it_waits_for_then_shows_it(
        client, builtin_model_dir):  # noqa: F811
    job_id = finished_job(client, merged_from=builtin_model_dir)
    answers = ask(client, job_id, compare=True)
    assert 'data-status="pending"' in answers.tuned_html and "worker w1" in answers.tuned_html
    assert "GET /api/generations/" in answers.tuned_html
    assert len(answers.waiting_ids) == 2  # the panel's timer polls these
    state = client.app_state
    generator = WarmGenerator(settings=state.settings)
    try:
        run_generation(answers.waiting_ids[0], settings=state.settings, database=state.database,
                       identity=WORKER, generator=generator)
        polled = try_it.answers_of(answers.waiting_ids, database=state.database,
                                   settings=state.settings, principal=OPEN_PRINCIPAL,
                                   wait_seconds=0)
        assert 'data-status="done"' in polled.tuned_html and polled.waiting_ids
        run_generation(answers.waiting_ids[1], settings=state.settings, database=state.database,
                       identity=WORKER, generator=generator)
    finally:
        generator.stop()
    polled = try_it.answers_of(answers.waiting_ids, database=state.database,
                               settings=state.settings, principal=OPEN_PRINCIPAL, wait_seconds=0)
    assert 'data-variant="base" data-status="done"' in polled.base_html
    assert polled.waiting_ids == ()  # the timer stops
