"""The worker's side of a data preflight (worker/dataset_preflight.py): a stored request
claimed once, its paths checked against this host's roots, the report or the error stored."""
from __future__ import annotations

import json

import pytest

from tunedeck.data.preflight_request import PreflightRequest
from tunedeck.data.preflight_store import PREFLIGHTS
from tunedeck.settings import Settings
from worker import dataset_preflight
from worker.dataset_preflight import run_dataset_preflight


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(home=tmp_path / "home")  # the allowed roots: pytest's folder (conftest)


def store(database, owner: str | None = None, **fields) -> int:
    with database.transaction() as session:
        return PREFLIGHTS.create(session=session, request=PreflightRequest(seq_len=64, **fields),
                                 owner=owner).id


def row(database, preflight_id: int):
    with database.transaction() as session:
        return PREFLIGHTS.get(session=session, request_id=preflight_id)


def test_a_stored_request_is_run_once_and_its_report_stored(database, settings, tmp_path,
                                                            builtin_model_dir):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{n} + 1?", "response": str(n + 1)}) + "\n"
                            for n in range(12)))
    preflight_id = store(database, dataset=str(data))
    assert run_dataset_preflight(preflight_id, settings=settings, database=database,
                                 worker_name="w1") == "done"
    done = row(database, preflight_id)
    assert (done.status, done.worker_name, done.error) == ("done", "w1", None)
    assert done.report["records"] == 12 and done.report["examples"][0]["trained_tokens"] > 0
    assert done.started_at is not None and done.finished_at is not None
    # A second delivery of the same message finds it taken.
    assert run_dataset_preflight(preflight_id, settings=settings, database=database,
                                 worker_name="w2") == "not pending"
    assert row(database, preflight_id).worker_name == "w1"


def test_a_path_outside_this_hosts_roots_is_refused_before_it_is_read(database, settings):
    preflight_id = store(database, dataset="/srv/elsewhere/train.jsonl")
    assert run_dataset_preflight(preflight_id, settings=settings, database=database,
                                 worker_name="w1") == "failed"
    failed = row(database, preflight_id)
    assert failed.status == "failed" and failed.report is None
    assert failed.error.startswith(
        "dataset /srv/elsewhere/train.jsonl: outside the allowed folders")


def test_a_missing_model_folder_is_named_as_a_jobs_input_check_names_it(database, settings,
                                                                        tmp_path):
    preflight_id = store(database, model=str(tmp_path / "no-model"))
    assert run_dataset_preflight(preflight_id, settings=settings, database=database,
                                 worker_name="w1") == "failed"
    assert row(database, preflight_id).error == (
        f"model {tmp_path / 'no-model'}: no such folder; expected a Hugging Face model folder")


def test_bad_data_fails_naming_the_field_file_and_record(database, settings, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "2+2?", "answer": "4"}\n')
    preflight_id = store(database, dataset=str(data))
    assert run_dataset_preflight(preflight_id, settings=settings, database=database,
                                 worker_name="w1") == "failed"
    assert row(database, preflight_id).error == (
        f"dataset {data}: record 1 has keys ['answer', 'question']; "
        "expected instruction/output, prompt/response or messages")


def test_an_unexpected_error_still_settles_the_row(database, settings, monkeypatch):
    def explode(*_arguments, **_options):
        raise RuntimeError("tokenizer exploded")

    monkeypatch.setattr(dataset_preflight, "_report", explode)
    preflight_id = store(database)
    assert run_dataset_preflight(preflight_id, settings=settings, database=database,
                                 worker_name="w1") == "failed"
    assert row(database, preflight_id).error == (
        "the preflight failed on worker w1: RuntimeError: tokenizer exploded")
