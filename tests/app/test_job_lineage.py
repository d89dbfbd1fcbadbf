"""`model: job:ID` (tunedeck/jobs/lineage.py): a job starts from a succeeded job's merged
weights. Submit refuses by `model` an id that is missing, hidden or not succeeded; the job
row lists its lineage; the job page links it and offers "Continue from this job"; the plan
reads the chain's first model; the worker hands the trainer the parent's merged folder."""
from __future__ import annotations

import json

import pytest

from app.actions.input_checks import parent_job_problems
from app.auth.principal import OPEN_PRINCIPAL, Principal
from app.ui.build_ui import continue_from_job
from app.ui.job_page import job_handlers
from tunedeck.jobs import store as job_store
from tunedeck.jobs.lineage import base_model, lineage, parent_job_id
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings
from worker.input_check import trainer_inputs

SFT = {"max_steps": 2}
GRPO = {"objective": "grpo", "dataset": "builtin:arithmetic-rl", "max_steps": 2,
        "micro_batch_size": 8, "seq_len": 512}


def stored_job(database, spec: dict, *, status: str | None, run_dir=None, owner=None) -> int:
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec.model_validate(spec),
                                      owner=owner).id
        if status in ("succeeded", "failed"):
            job_store.mark_job_running(session=session, job_id=job_id, worker_host="h",
                                       run_dir=str(run_dir or f"/nowhere/job-{job_id}"))
        if status == "succeeded":
            job_store.mark_job_succeeded(session=session, job_id=job_id)
        elif status == "failed":
            job_store.mark_job_failed(session=session, job_id=job_id, error="boom")
    return job_id


def refused(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {item["loc"][-1]: item["msg"] for item in response.json()["detail"]}


def test_a_job_id_that_is_missing_or_did_not_succeed_is_a_422_naming_model(client):
    database = client.app_state.database
    failed = stored_job(database, SFT, status="failed")
    queued = stored_job(database, SFT, status=None)
    for model, words in ((f"job:{failed}", f"job {failed} is failed; only a succeeded job's"),
                         (f"job:{queued}", f"job {queued} is queued"),
                         ("job:999999", "no such job that you may read"),
                         ("job:9999999999", "no such job that you may read"),
                         ("job:x", "expected job:ID")):
        assert words in refused(client.post("/api/jobs", json={**GRPO, "model": model}))["model"]
    assert len(client.get("/api/jobs").json()) == 2  # nothing more was stored


def test_a_chain_sft_dpo_grpo_is_submitted_and_listed_as_its_lineage(client):
    database = client.app_state.database
    sft = stored_job(database, SFT, status="succeeded")
    dpo = stored_job(database, {"objective": "dpo", "model": f"job:{sft}", "max_steps": 2,
                                "dataset": "builtin:arithmetic-preference"}, status="succeeded")
    response = client.post("/api/jobs", json={**GRPO, "model": f"job:{dpo}"})
    assert response.status_code == 201, response.text
    grpo = response.json()["id"]
    row = client.get(f"/api/jobs/{grpo}").json()
    assert row["spec"]["model"] == f"job:{dpo}" and row["name"].startswith(f"job-{dpo}-grpo-lora-zero2")
    assert [(item["id"], item["objective"]) for item in row["lineage"]] == [
        (sft, "sft"), (dpo, "dpo"), (grpo, "grpo")]
    assert [item["id"] for item in client.get(f"/api/jobs/{sft}").json()["lineage"]] == [sft]
    with database.transaction() as session:
        assert base_model(session, f"job:{dpo}") == "builtin:tiny-llama"
    # The plan of a job:ID spec is its chain's first model's.
    plan = client.post("/api/plan", json={"spec": {**GRPO, "model": f"job:{dpo}"},
                                          "gpus": {"count": 1, "memory_gb": 24}})
    assert plan.status_code == 200, plan.text
    failed_plan = client.post("/api/plan", json={"spec": {**GRPO, "model": "job:424242"},
                                                 "gpus": {"count": 1, "memory_gb": 24}})
    assert failed_plan.status_code == 422 and "no such job" in failed_plan.text


def test_the_job_page_links_the_lineage_and_continue_sets_the_forms_model(database):
    sft = stored_job(database, SFT, status="succeeded")
    grpo = stored_job(database, {**GRPO, "model": f"job:{sft}"}, status=None)
    page = job_handlers.load_job_page(grpo, database=database, principal=OPEN_PRINCIPAL)
    assert f'Lineage: <a href="/?job={sft}" class="job-link">#{sft}</a> sft lora → ' in page.headline
    assert f"#{grpo}</a> grpo lora" in page.headline
    assert "GRPO (G 8, dapo, rewards numeric_match)" in page.headline
    assert continue_from_job(str(sft)) == (f"job:{sft}", "New job")
    assert continue_from_job("")[1] == ""  # no job open: no tab to show


def test_only_the_owner_or_an_admin_may_start_from_a_job(database):
    theirs = stored_job(database, SFT, status="succeeded", owner="alice")
    spec = JobSpec.model_validate({**GRPO, "model": f"job:{theirs}"})
    bob = Principal(name="bob", is_admin=False)
    (problem,) = parent_job_problems(spec, principal=bob, database=database)
    assert problem == ("model", f"model job:{theirs}: no such job that you may read")
    assert parent_job_problems(spec, principal=Principal(name="alice", is_admin=False),
                               database=database) == []
    assert parent_job_problems(spec, principal=Principal(name="root", is_admin=True),
                               database=database) == []


def test_the_worker_hands_the_trainer_the_parents_merged_folder(database, tmp_path):
    run_dir = tmp_path / "job-parent"
    (run_dir / "merged").mkdir(parents=True)
    (run_dir / "merged" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    parent = stored_job(database, SFT, status="succeeded", run_dir=run_dir)
    failed = stored_job(database, SFT, status="failed")
    settings = Settings(home=tmp_path)
    spec = JobSpec.model_validate({**GRPO, "model": f"job:{parent}"})
    inputs = trainer_inputs(spec, database=database, settings=settings)
    assert inputs.problem is None and inputs.spec.model == str(run_dir / "merged")
    assert inputs.extra_roots == (run_dir / "merged",) and inputs.spec.grpo == spec.grpo
    gone = trainer_inputs(spec.model_copy(update={"model": f"job:{failed}"}), database=database,
                          settings=settings)
    assert "is failed" in gone.problem
    plain = JobSpec.model_validate(SFT)
    assert trainer_inputs(plain, database=database, settings=settings).spec is plain
    # A Python reward on a worker whose administrator has not turned them on.
    python = JobSpec.model_validate({**GRPO, "grpo": {"rewards": [
        {"name": "python", "path": str(tmp_path / "r.py")}]}})
    refused_here = trainer_inputs(python, database=database, settings=settings)
    assert "grpo.rewards[0] (python" in refused_here.problem
    assert trainer_inputs(python, database=database, settings=Settings(
        home=tmp_path, python_rewards=True)).problem is None
    with database.transaction() as session:
        assert [job.id for job in lineage(session, job_store.create_job(
            session=session, spec=spec))][:1] == [parent]


@pytest.mark.parametrize("model, expected", [("job:12", 12), ("job:0", None), ("job:", None),
                                             ("builtin:tiny-llama", None), ("job:12x", None)])
def test_a_job_reference_is_job_colon_a_positive_number(model, expected):
    assert parent_job_id(model) == expected


def test_grpo_data_without_a_rewarded_column_is_a_422_naming_the_dataset(client, tmp_path):
    data = tmp_path / "rl.jsonl"
    data.write_text(json.dumps({"prompt": "Q", "solution": "4"}) + "\n")
    problems = refused(client.post("/api/jobs", json={**GRPO, "dataset": str(data)}))
    assert "no column 'answer', which grpo.rewards[0] (numeric_match) reads" in problems["dataset"]
    builtin = refused(client.post("/api/jobs", json={**GRPO, "dataset": "builtin:arithmetic"}))
    assert "its columns are ['prompt', 'response']" in builtin["dataset"]
    mapped = client.post("/api/jobs", json={**GRPO, "dataset": str(data), "grpo": {
        "rewards": [{"name": "numeric_match", "column": "solution"}]}})
    assert mapped.status_code == 201, mapped.text


def test_a_python_reward_is_a_422_naming_it_until_an_administrator_turns_them_on(tmp_path):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tunedeck.db.migrate import upgrade_database

    reward_file = tmp_path / "data" / "my_reward.py"
    reward_file.parent.mkdir()
    reward_file.write_text("def reward(prompts, completions):\n    return [0.0] * len(completions)\n")
    spec = {**GRPO, "grpo": {"rewards": [{"name": "contains", "text": "7"},
                                         {"name": "python", "path": str(reward_file)}]}}
    for allowed in (False, True):
        settings = Settings(home=tmp_path, python_rewards=allowed)
        upgrade_database(settings.resolved_database_url)
        with TestClient(create_app(settings, with_ui=False, with_sweeper=False)) as client:
            response = client.post("/api/jobs", json=spec)
            if not allowed:
                assert "TUNEDECK_PYTHON_REWARDS=1" in refused(response)["grpo.rewards[1]"]
                outside = client.post("/api/jobs", json={**spec, "grpo": {"rewards": [
                    {"name": "python", "path": "/etc/reward.py"}]}})
                assert "outside the allowed folders" in refused(outside)["grpo.rewards[0].path"]
            else:
                assert response.status_code == 201, response.text
