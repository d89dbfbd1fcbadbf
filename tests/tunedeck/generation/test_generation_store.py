"""The job_generations row and its writers, on SQLite and PostgreSQL: a claim wins once,
only a running row settles, a job's deletion takes its generations with it; and the
request model's rules."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from tunedeck import job_store
from tunedeck.generation import store
from tunedeck.generation.request import GenerationRequest
from tunedeck.generation.weights import missing_weights, variant_weights
from tunedeck.job_spec import JobSpec
from tunedeck.run_folder import RunFolder


def succeeded_job(database) -> int:
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir="/tmp/x",
                                   worker_host="h", worker_name="w")
        job_store.mark_job_succeeded(session=session, job_id=job_id)
    return job_id


def test_a_claim_wins_once_and_only_a_running_row_settles(database):
    job_id = succeeded_job(database)
    request = GenerationRequest.of_prompt("hi", temperature=0)
    with database.transaction() as session:
        generation_id = store.create_generation(session=session, job_id=job_id, request=request,
                                                owner=None, worker_name="w").id
    with database.transaction() as session:
        store.finish_generation(session=session, generation_id=generation_id, answer={"text": "x"})
        assert store.get_generation(session=session, generation_id=generation_id).status == "pending"
        assert store.claim_generation(session=session, generation_id=generation_id,
                                      worker_name="w").status == "running"
        assert store.claim_generation(session=session, generation_id=generation_id,
                                      worker_name="other") is None
        store.finish_generation(session=session, generation_id=generation_id,
                                answer={"text": "hello", "tokens": 2, "seconds": 0.1})
        store.fail_generation(session=session, generation_id=generation_id, error="late")
    with database.transaction() as session:
        row = store.generation_to_dict(store.get_generation(session=session,
                                                            generation_id=generation_id))
    assert (row["status"], row["text"], row["tokens"], row["error"]) == ("done", "hello", 2, None)
    assert (row["variant"], row["job_id"], row["worker_name"]) == ("merged", job_id, "w")


def test_deleting_a_job_deletes_its_generations(database):
    job_id = succeeded_job(database)
    with database.transaction() as session:
        generation_id = store.create_generation(
            session=session, job_id=job_id, request=GenerationRequest.of_prompt("hi"),
            owner=None, worker_name="w").id
    with database.transaction() as session:
        job_store.delete_job(session=session, job_id=job_id)
    with database.transaction() as session, pytest.raises(store.GenerationNotFound):
        store.get_generation(session=session, generation_id=generation_id)


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
