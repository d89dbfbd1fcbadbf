"""GET /api/compare and POST /api/jobs/{id}/compare-backends: a real SQLite database and
the real server-less broker (no worker runs, so jobs stay queued)."""
import pytest

from tunedeck.metrics import store as metric_store

SPEC = {"name": "cmp", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
        "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 8,
        "checkpoint_every_steps": 4}


def submit(client, **changes) -> int:
    response = client.post("/api/jobs", json={**SPEC, **changes})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_compare_returns_jobs_diff_and_series(client):
    first, second = submit(client), submit(client, backend="fsdp")
    with client.app_state.database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=first, events=[
            (0, {"kind": "step", "rank": 0, "time": 1.0, "step": 1, "loss": 2.0,
                 "tokens_per_second": 900.0}),
            (1, {"kind": "memory", "rank": 1, "time": 1.5, "allocated_mb": 300.0})])
    body = client.get("/api/compare", params={"ids": f"{first},{second}"}).json()
    assert [(job["id"], job["status"], job["backend"]) for job in body["jobs"]] == [
        (first, "queued", "zero2"), (second, "queued", "fsdp")]
    assert body["diff"] == [{"field": "backend", "values": ["zero2", "fsdp"]}]
    assert body["series"]["loss"] == [{"job_id": first, "step": 1, "loss": 2.0, "kind": "train"}]
    assert body["series"]["tokens_per_second"] == [
        {"job_id": first, "step": 1, "tokens_per_second": 900.0}]
    assert body["series"]["memory"] == [
        {"job_id": first, "rank": 1, "seconds": 0.0, "memory_mb": 300.0}]


@pytest.mark.parametrize("ids", ["1", "1,1", "1,two", ""])
def test_compare_refuses_fewer_than_two_ids_or_a_bad_list(client, ids):
    submit(client), submit(client)
    response = client.get("/api/compare", params={"ids": ids})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "ids"]


def test_compare_names_the_missing_job(client):
    first = submit(client)
    response = client.get("/api/compare", params={"ids": f"{first},42"})
    assert response.status_code == 404 and "job 42" in response.json()["detail"]


def test_compare_backends_queues_a_zero2_and_an_fsdp_copy(client, tmp_path):
    source = submit(client)
    response = client.post(f"/api/jobs/{source}/compare-backends")
    assert response.status_code == 201, response.text
    body = response.json()
    zero2, fsdp = body["jobs"]
    assert body["compare_url"] == f"/api/compare?ids={zero2['id']},{fsdp['id']}"
    assert (zero2["name"], fsdp["name"]) == ("cmp (zero2)", "cmp (fsdp)")
    assert (zero2["status"], fsdp["status"]) == ("queued", "queued")
    for job, backend in ((zero2, "zero2"), (fsdp, "fsdp")):
        source_spec = client.get(f"/api/jobs/{source}").json()["spec"]
        expected = {**source_spec, "backend": backend, "name": f"cmp ({backend})",
                    "max_steps": 8, "checkpoint_every_steps": 0}
        assert job["spec"] == expected
    # The source job's message plus one for each variant.
    assert len(list((tmp_path / "broker" / "queue").iterdir())) == 3
    events = [event["message"] for event in client.get(f"/api/jobs/{source}/events").json()]
    assert f"compared backends: jobs {zero2['id']} and {fsdp['id']}" in events
    compared = client.get(body["compare_url"])
    assert compared.status_code == 200
    assert [entry["field"] for entry in compared.json()["diff"]] == ["backend", "name"]


def test_compare_backends_step_budget(client):
    long_job = submit(client, max_steps=1000)
    jobs = client.post(f"/api/jobs/{long_job}/compare-backends").json()["jobs"]
    assert [job["spec"]["max_steps"] for job in jobs] == [50, 50]
    jobs = client.post(f"/api/jobs/{long_job}/compare-backends", json={"max_steps": 6}).json()["jobs"]
    assert [job["spec"]["max_steps"] for job in jobs] == [6, 6]
    assert client.post(f"/api/jobs/{long_job}/compare-backends",
                       json={"max_steps": 0}).status_code == 422


def test_compare_backends_refuses_qlora_and_unknown_jobs(client, tmp_path):
    qlora = submit(client, method="qlora")
    response = client.post(f"/api/jobs/{qlora}/compare-backends")
    assert response.status_code == 409 and "FSDP" in response.json()["detail"]
    assert client.post("/api/jobs/999/compare-backends").status_code == 404
    assert len(client.get("/api/jobs").json()) == 1
