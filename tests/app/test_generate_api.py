"""POST /api/jobs/{id}/generate and GET /api/generations/{id} in-process, with the worker's
own function (worker/generation.py, the Celery task's body, and its real generation
process) answering the stored request: validation (422 naming the field), another user's
job (404), a job that cannot answer (409 naming why), and the waiting reasons."""
from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.trainer.conftest import builtin_model_dir, tunedeck_home  # noqa: F401 (fixtures)
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.accounts import audit, users as accounts
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.models import utc_now
from tunedeck.spec.job_spec import JobSpec
from tunedeck.db.migrate import upgrade_database
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from worker.generation import WarmGenerator, run_generation
from worker.worker_identity import WorkerIdentity

WORKER = WorkerIdentity(name="w1", host="box", queues=("default",), gpu_ids=None, concurrency=1)
PROMPT = {"messages": [{"role": "user", "content": "What is 2 plus 3?"}], "max_new_tokens": 8,
          "temperature": 0}



@pytest.fixture
def client(tmp_path):
    """tests/app's client, with a POST that waits 1 s for a worker's answer (not 45)."""
    settings = Settings(home=tmp_path, generation_wait_seconds=1.0)
    upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    with TestClient(app) as client:
        client.app_state = app.state
        yield client


def finished_job(client, status: str = "succeeded", *, method: str = "lora",
                 merged_from=None, owner: str | None = None) -> int:
    """A job that ran on worker w1; with `merged_from`, its merged/ is a copy of that model."""
    database, settings = client.app_state.database, client.app_state.settings
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, owner=owner,
                                      spec=JobSpec(max_steps=2, method=method)).id
    run = RunFolder(settings.run_dir_for(job_id))
    run.path.mkdir(parents=True)
    if merged_from is not None:
        shutil.copytree(merged_from, run.merged_dir)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="box", worker_name=WORKER.name)
        if status == "succeeded":
            job_store.mark_job_succeeded(session=session, job_id=job_id)
        elif status == "failed":
            job_store.mark_job_failed(session=session, job_id=job_id, error="boom")
    return job_id


def heartbeat(client, name: str = WORKER.name) -> None:
    with client.app_state.database.transaction() as session:
        worker_registry.record_heartbeat(session=session, name=name, host="box",
                                         queues=["default"], pid=1, concurrency=1,
                                         resources={"gpus": None}, started_at=utc_now())


@pytest.mark.parametrize("body, field, words", [
    ({**PROMPT, "messages": [{"role": "user", "content": "  "}]}, "messages", "empty message"),
    ({**PROMPT, "messages": []}, "messages", "at least 1"),
    ({**PROMPT, "messages": [{"role": "assistant", "content": "hi"}]}, "messages", "the user's"),
    ({**PROMPT, "prompt": "hi"}, "prompt", "unknown field `prompt`"),
    ({**PROMPT, "variant": "lora"}, "variant", "'merged', 'adapter' or 'base'"),
    ({**PROMPT, "temperature": -1}, "temperature", "greater than or equal to 0"),
    ({**PROMPT, "max_new_tokens": 1025}, "max_new_tokens", "at most 1024"),
])
def test_bad_input_is_a_422_naming_the_field(client, body, field, words):
    job_id = finished_job(client)
    response = client.post(f"/api/jobs/{job_id}/generate", json=body)
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert field in problem["loc"] and words in problem["msg"], problem


@pytest.mark.parametrize("status", ["queued", "running", "failed"])
def test_a_job_that_did_not_succeed_is_a_409_naming_its_status(client, status):
    if status == "queued":
        with client.app_state.database.transaction() as session:
            job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=2)).id
    else:
        job_id = finished_job(client, status)
    response = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT)
    assert response.status_code == 409
    assert response.json()["detail"] == (f"job {job_id} is {status}: only a succeeded job's "
                                         "model answers prompts")


def test_missing_weights_and_a_full_jobs_adapter_are_409s_naming_them(client, builtin_model_dir):  # noqa: F811
    job_id = finished_job(client)  # its run folder has no merged/
    response = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT)
    assert response.status_code == 409
    assert "variant merged" in response.json()["detail"]
    assert "merged weights" in response.json()["detail"] and "deleted" in response.json()["detail"]
    adapter = client.post(f"/api/jobs/{job_id}/generate", json={**PROMPT, "variant": "adapter"})
    assert adapter.status_code == 409 and "adapter" in adapter.json()["detail"]
    shutil.rmtree(client.app_state.settings.run_dir_for(job_id))
    folder_gone = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT)
    assert folder_gone.status_code == 409 and "run folder" in folder_gone.json()["detail"]

    full = finished_job(client, method="full", merged_from=builtin_model_dir)
    response = client.post(f"/api/jobs/{full}/generate", json={**PROMPT, "variant": "adapter"})
    assert response.status_code == 409
    assert "full fine-tune and has no adapter" in response.json()["detail"]


def test_unknown_and_another_users_jobs_and_generations_are_404(client, builtin_model_dir):  # noqa: F811
    assert client.post("/api/jobs/999/generate", json=PROMPT).status_code == 404
    assert client.get("/api/generations/999").status_code == 404
    database = client.app_state.database
    with database.transaction() as session:
        accounts.create_user(session=session, name="alice", password="p" * 12)
        accounts.create_user(session=session, name="bob", password="p" * 12)
        alice = accounts.create_api_token(session=session, user_name="alice", label="t")
        bob = accounts.create_api_token(session=session, user_name="bob", label="t")
    job_id = finished_job(client, merged_from=builtin_model_dir, owner="alice")
    as_bob = {"Authorization": f"Bearer {bob}"}
    as_alice = {"Authorization": f"Bearer {alice}"}
    assert client.post(f"/api/jobs/{job_id}/generate", json=PROMPT,
                       headers=as_bob).status_code == 404
    mine = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT, headers=as_alice)
    assert mine.status_code == 202, mine.text
    assert client.get(f"/api/generations/{mine.json()['id']}", headers=as_bob).status_code == 404
    assert client.get(f"/api/generations/{mine.json()['id']}",
                      headers=as_alice).status_code == 200


def test_without_its_worker_a_202_at_once_then_the_worker_answers(client, builtin_model_dir):  # noqa: F811
    job_id = finished_job(client, merged_from=builtin_model_dir)
    response = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT)
    assert response.status_code == 202, response.text
    pending = response.json()
    assert pending["status"] == "pending" and pending["job_id"] == job_id
    assert "worker w1, which ran job" in pending["waiting"] and "is not running" in pending["waiting"]
    assert response.headers["location"] == f"/api/generations/{pending['id']}"
    broker_queue = client.app_state.settings.broker_folder / "queue"
    [message] = list(broker_queue.iterdir())
    assert b"tunedeck.generate" in message.read_bytes()
    assert b"tunedeck.worker.w1" in message.read_bytes()

    heartbeat(client)
    assert "queued on worker w1" == client.get(f"/api/generations/{pending['id']}").json()["waiting"]
    generator = WarmGenerator(settings=client.app_state.settings)
    try:
        state = client.app_state
        assert run_generation(pending["id"], settings=state.settings, database=state.database,
                              identity=WORKER, generator=generator) == "done"
        assert run_generation(pending["id"], settings=state.settings, database=state.database,
                              identity=WORKER, generator=generator) == "not pending"
    finally:
        generator.stop()
    done = client.get(f"/api/generations/{pending['id']}").json()
    assert done["status"] == "done" and done["waiting"] is None and done["error"] is None
    assert done["tokens"] == 8 and done["text"] and done["seconds"] > 0
    assert (done["device"], done["variant"], done["worker_name"]) == ("cpu", "merged", "w1")
    with client.app_state.database.transaction() as session:
        [event] = [event for event in audit.list_events(session=session)
                   if event.action == "generate"]
        assert (event.job_id, event.detail) == (job_id, f"generation {pending['id']}: merged")


def test_a_worker_busy_training_says_so_while_the_prompt_is_queued(client, builtin_model_dir):  # noqa: F811
    job_id = finished_job(client, merged_from=builtin_model_dir)
    heartbeat(client)
    training = finished_job(client, status="running")
    response = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT)
    assert response.status_code == 202  # after the (shortened) wait: nobody answers here
    answer = client.get(f"/api/generations/{response.json()['id']}").json()
    assert answer["waiting"] == (f"queued: worker w1 is busy training job {training}; the "
                                 "prompt runs on its spare thread, never on the job's GPUs")


def test_a_worker_whose_gpus_all_train_queues_the_prompt_until_one_is_free(
        client, builtin_model_dir):  # noqa: F811
    from tunedeck.generation.store import GENERATIONS

    job_id = finished_job(client, merged_from=builtin_model_dir)
    database = client.app_state.database
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name=WORKER.name, host="box", queues=["default"], pid=1,
            concurrency=1, resources={"gpus": [{"index": 0}]}, started_at=utc_now())
    training = finished_job(client, status="running")
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=training)
        job.gpu_indices = [0]
    response = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT)
    assert response.status_code == 202
    generation_id = response.json()["id"]
    assert response.json()["waiting"] == (f"queued: worker w1 is busy training job {training} "
                                          "on all its GPUs; the prompt runs once one is free")
    gpu_worker = WorkerIdentity(name="w1", host="box", queues=("default",), gpu_ids=(0,),
                                concurrency=1)
    generator = WarmGenerator(settings=client.app_state.settings)
    state = client.app_state
    assert run_generation(generation_id, settings=state.settings, database=database,
                          identity=gpu_worker, generator=generator) == "waiting for a GPU"
    assert generator.pid is None
    with database.transaction() as session:
        assert GENERATIONS.pending_ids(session=session, worker_name="w1") == [generation_id]
        job_store.mark_job_succeeded(session=session, job_id=training)
    with database.transaction() as session:
        # A worker restarted mid-answer leaves a running row behind: failed as it starts.
        GENERATIONS.claim(session=session, request_id=generation_id, worker_name="w1")
        assert GENERATIONS.fail_interrupted(session=session, worker_name="w1",
                                            error="worker w1 stopped while generating") == 1
    answer = client.get(f"/api/generations/{generation_id}").json()
    assert answer["status"] == "failed" and "stopped while generating" in answer["error"]


def test_a_worker_sends_its_waiting_prompts_again_when_a_job_ends(client, builtin_model_dir):  # noqa: F811
    from worker.tasks import WorkerProcess

    job_id = finished_job(client, merged_from=builtin_model_dir)
    response = client.post(f"/api/jobs/{job_id}/generate", json=PROMPT)
    queue = client.app_state.settings.broker_folder / "queue"
    for message in queue.iterdir():
        message.unlink()  # as if the worker had taken it and left the row pending
    worker = WorkerProcess(client.app_state.settings.model_copy(update={"worker_name": "w1"}))
    worker.offer_waiting_jobs()
    [message] = list(queue.iterdir())
    assert b"tunedeck.generate" in message.read_bytes()
    assert f"[{response.json()['id']}]".encode() in message.read_bytes()
