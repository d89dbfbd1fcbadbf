"""The REST API in-process (TestClient), with a real SQLite database and the real
server-less broker (no worker runs here, so jobs stay queued)."""
import pytest

from tunedeck.metrics import store as metric_store

SPEC = {"name": "api-test", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
        "method": "lora", "backend": "fsdp", "num_gpus": 2, "max_steps": 5}



def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}


def test_submit_stores_a_queued_job_and_enqueues_its_id(client, tmp_path):
    response = client.post("/api/jobs", json=SPEC)
    assert response.status_code == 201
    job = response.json()
    assert job["status"] == "queued" and job["name"] == "api-test"
    assert job["spec"]["backend"] == "fsdp" and job["spec"]["lora"]["r"] == 16
    assert client.get(f"/api/jobs/{job['id']}").json()["id"] == job["id"]
    assert [row["id"] for row in client.get("/api/jobs").json()] == [job["id"]]
    messages = list((tmp_path / "broker" / "queue").iterdir())
    assert len(messages) == 1 and b"tunedeck.run_job" in messages[0].read_bytes()


@pytest.mark.parametrize("change, field", [
    ({"lora": {"r": 0}}, ["body", "lora", "r"]),
    ({"backend": "zero3"}, ["body", "backend"]),
    ({"surprise": 1}, ["body", "surprise"]),
    ({"max_steps": "many"}, ["body", "max_steps"]),
])
def test_bad_spec_is_422_naming_the_field(client, change, field):
    response = client.post("/api/jobs", json={**SPEC, **change})
    assert response.status_code == 422
    assert field in [error["loc"] for error in response.json()["detail"]]
    assert client.get("/api/jobs").json() == []


def test_config_before_launch_is_generated_from_the_spec(client):
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    config = client.get(f"/api/jobs/{job_id}/config").json()
    assert config["backend"] == "fsdp" and config["source"] == "generated"
    assert config["config"]["mixed_precision"]["param_dtype"] == "bfloat16"
    assert config["argv"][:2] == ["torchrun", "--standalone"]


def test_cancel_of_a_queued_job_is_202_and_final(client):
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    response = client.post(f"/api/jobs/{job_id}/cancel")
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    assert client.post(f"/api/jobs/{job_id}/cancel").json()["status"] == "cancelled"


def test_metrics_series(client):
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    database = client.app.state.database
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=[
            (0, {"kind": "step", "rank": 0, "time": 1.0, "step": 1, "loss": 2.0}),
            (1, {"kind": "memory", "rank": 0, "time": 1.0, "rss_mb": 200.0}),
            (2, {"kind": "eval", "rank": 0, "time": 2.0, "step": 1, "eval_loss": 2.5,
                 "eval_tokens": 90}),
        ])
    metrics = client.get(f"/api/jobs/{job_id}/metrics").json()
    assert metrics["train"][0]["loss"] == 2.0 and metrics["memory"][0]["rss_mb"] == 200.0
    assert metrics["eval"] == [{"time": 2.0, "step": 1, "eval_loss": 2.5, "eval_tokens": 90}]


def test_unknown_job_and_missing_artifacts_are_404(client):
    assert client.get("/api/jobs/12345").status_code == 404
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    response = client.get(f"/api/jobs/{job_id}/artifacts/merged")
    assert response.status_code == 404 and "no merged artifact" in response.json()["detail"]
    assert client.get(f"/api/jobs/{job_id}/artifacts/..%2F..%2Fetc").status_code == 404


def test_openapi_document_lists_the_contract_routes(client):
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("/api/jobs", "/api/jobs/{job_id}", "/api/jobs/{job_id}/metrics",
                  "/api/jobs/{job_id}/cancel", "/api/jobs/{job_id}/config",
                  "/api/jobs/{job_id}/artifacts/{kind}", "/healthz"):
        assert route in paths
