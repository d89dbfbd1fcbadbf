"""Checkpoints and Resume through the REST API: a real SQLite database, the real server-less
broker, and a run folder laid out the way the trainer leaves it."""
import json


from tunedeck.jobs import store as job_store
from tunedeck.run_folder import CHECKPOINT_STATE_FILE, RunFolder

SPEC = {"name": "resume-test", "max_steps": 20, "checkpoint_every_steps": 5}



def fail_job_with_checkpoints(client, tmp_path, steps: list[int], partial: list[int] = ()) -> int:
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    run = RunFolder(tmp_path / "runs" / f"job-{job_id}")
    for step in [*steps, *partial]:
        folder = run.checkpoint_dir(step)
        folder.mkdir(parents=True)
        (folder / "rank-0.bin").write_bytes(b"x" * 100)
        if step not in partial:
            (folder / CHECKPOINT_STATE_FILE).write_text(json.dumps({"step": step}))
    with client.app_state.database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
        job_store.mark_job_failed(session=session, job_id=job_id, error="worker lost")
    return job_id


def test_checkpoints_are_listed_newest_first_and_partial_ones_are_hidden(client, tmp_path):
    job_id = fail_job_with_checkpoints(client, tmp_path, [5, 10], partial=[15])
    checkpoints = client.get(f"/api/jobs/{job_id}/checkpoints").json()
    assert [c["step"] for c in checkpoints] == [10, 5]
    assert checkpoints[0]["bytes"] >= 100 and checkpoints[0]["path"].endswith("step-00000010")


def test_resume_queues_the_job_again_from_its_latest_checkpoint(client, tmp_path):
    job_id = fail_job_with_checkpoints(client, tmp_path, [5, 10])
    response = client.post(f"/api/jobs/{job_id}/resume")
    assert response.status_code == 202
    assert response.json()["status"] == "queued" and response.json()["error"] is None
    events = [e["message"] for e in client.get(f"/api/jobs/{job_id}/events").json()]
    assert "resume requested from the checkpoint at step 10" in events
    messages = list((tmp_path / "broker" / "queue").iterdir())
    assert len(messages) == 2  # the submit, then the resume


def test_resume_without_a_checkpoint_or_of_a_queued_job_is_409_and_says_why(client, tmp_path):
    no_checkpoint = fail_job_with_checkpoints(client, tmp_path, [], partial=[5])
    response = client.post(f"/api/jobs/{no_checkpoint}/resume")
    assert response.status_code == 409 and "no complete checkpoint" in response.json()["detail"]
    queued = client.post("/api/jobs", json=SPEC).json()["id"]
    response = client.post(f"/api/jobs/{queued}/resume")
    assert response.status_code == 409 and "is queued" in response.json()["detail"]
    assert client.post("/api/jobs/999/resume").status_code == 404
