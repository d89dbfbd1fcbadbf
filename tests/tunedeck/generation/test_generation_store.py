"""The job_generations rows, on SQLite and PostgreSQL: a done one answers with its text at
the top level, a job's deletion takes its generations with it; and the request model's
rules. (Claims and settling, for every kind of worker request: tests/tunedeck/
test_worker_requests.py.)"""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from tunedeck.jobs import store as job_store
from tunedeck.generation.store import GENERATIONS, generation_to_dict
from tunedeck.generation.request import GenerationRequest
from tunedeck.generation.weights import missing_weights, variant_weights
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder
from tunedeck.worker_requests.store import RequestNotFound


def succeeded_job(database) -> int:
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir="/tmp/x",
                                   worker_host="h", worker_name="w")
        job_store.mark_job_succeeded(session=session, job_id=job_id)
    return job_id


def test_a_done_generation_answers_with_its_text_at_the_top_level(database):
    job_id = succeeded_job(database)
    request = GenerationRequest.of_prompt("hi", temperature=0)
    with database.transaction() as session:
        generation_id = GENERATIONS.create(session=session, job_id=job_id, request=request,
                                           owner=None, worker_name="w").id
    with database.transaction() as session:
        GENERATIONS.claim(session=session, request_id=generation_id, worker_name="w")
        GENERATIONS.finish(session=session, request_id=generation_id,
                           result={"text": "hello", "tokens": 2, "seconds": 0.1})
    with database.transaction() as session:
        row = generation_to_dict(GENERATIONS.get(session=session, request_id=generation_id))
    assert (row["status"], row["text"], row["tokens"], row["error"]) == ("done", "hello", 2, None)
    assert (row["variant"], row["job_id"], row["worker_name"]) == ("merged", job_id, "w")


def test_deleting_a_job_deletes_its_generations(database):
    job_id = succeeded_job(database)
    with database.transaction() as session:
        generation_id = GENERATIONS.create(
            session=session, job_id=job_id, request=GenerationRequest.of_prompt("hi"),
            owner=None, worker_name="w").id
    with database.transaction() as session:
        job_store.delete_job(session=session, job_id=job_id)
    with database.transaction() as session, pytest.raises(RequestNotFound):
        GENERATIONS.get(session=session, request_id=generation_id)


def test_a_request_names_what_is_wrong():
    with pytest.raises(ValidationError, match="messages"):
        GenerationRequest.of_prompt("\x00")
    with pytest.raises(ValidationError, match="top_p"):
        GenerationRequest.of_prompt("hi", top_p=0)
    conversation = GenerationRequest.model_validate({"messages": [
        {"role": "system", "content": "Be brief."}, {"content": "2 + 2?"}]})
    assert [message.role for message in conversation.messages] == ["system", "user"]


def test_each_variant_reads_its_own_folder(tmp_path):
    run = RunFolder(tmp_path / "job-3")
    spec = JobSpec(max_steps=1)
    assert variant_weights(spec, run, "merged").model_source == str(run.merged_dir)
    assert variant_weights(spec, run, "adapter").adapter_dir == str(run.adapter_dir)
    assert variant_weights(spec, run, "base").model_source == spec.model
    assert "run folder" in missing_weights(spec, run, "merged", job_id=3)
    run.adapter_dir.mkdir(parents=True)
    (run.adapter_dir / "adapter_config.json").write_text("{}")
    assert missing_weights(spec, run, "adapter", job_id=3) is None
    assert "merged weights" in missing_weights(spec, run, "merged", job_id=3)
    assert missing_weights(spec, run, "base", job_id=3) is None
