"""`tunedeck up` with TUNEDECK_LOG_FORMAT=json: the web's and the worker's lines are JSON
objects naming their service; an API call's access line has the caller's request id (sent
back in X-Request-ID); the worker's lines about a job name the job and the worker; and no
line holds the API token or the password, nor kombu's warning of a broker URL without a
host; and once stopped, no standby's ready file is left in the warm folder."""
from __future__ import annotations

import json

import pytest

from harness.chaos_scenarios import FINISHED, SMALL_JOB
from harness.servers import add_account, running_tunedeck

pytestmark = [pytest.mark.torchrun]
PASSWORD = "a long enough password"


def test_json_logs_of_web_and_worker_with_request_and_job_ids_and_no_secret(tmp_path):
    home = tmp_path / "home"
    env = {"TUNEDECK_LOG_FORMAT": "json"}
    token = add_account(home, "ops", PASSWORD, admin=True, extra_env=env)
    with running_tunedeck(home, extra_env=env, token=token) as server:
        job_id = server.submit({**SMALL_JOB, "name": "logged"})
        assert server.wait_for(job_id, FINISHED)["status"] == "succeeded"
        answer = server.http.get(f"/api/jobs/{job_id}", headers={"X-Request-ID": "ops-check-1"})
        assert answer.headers["x-request-id"] == "ops-check-1"
        assert server.http.get("/api/jobs").headers["x-request-id"]  # one of its own
        failed = server.http.post("/login", data={"username": "ops", "password": "wrong one!"})
        assert failed.status_code == 401
    text = (home / "up.log").read_text()
    assert token not in text and PASSWORD not in text
    assert "No hostname was supplied" not in text  # kombu, of a broker URL without a host
    assert not list((home / "warm").rglob("*.ready"))  # the standby's, gone with it
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert {line["service"] for line in lines} >= {"web", "worker"}
    access = [line for line in lines if line["logger"] == "tunedeck.access"]
    [checked] = [line for line in access if line.get("request_id") == "ops-check-1"]
    assert checked["message"].startswith(f"GET /api/jobs/{job_id} 200 ")
    about_job = [line for line in lines if line["service"] == "worker"
                 and line.get("job_id") == job_id]
    assert any(line["message"] == f"job {job_id}: succeeded" for line in about_job), about_job
    assert all(line["worker"] for line in about_job)
