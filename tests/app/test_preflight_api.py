"""POST /api/datasets/preflight and GET /api/datasets/preflight/{id} in-process, with the
worker's own function (worker/dataset_preflight.py, the Celery task's body) serving the
stored request: at once when no worker lives (202, then the row fills), or while the POST
waits on a live one (200 with the report)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from tests.trainer.conftest import builtin_model_dir, tunedeck_home  # noqa: F401 (fixtures)
from tunedeck.accounts import audit, users as accounts
from tunedeck.cluster import workers as worker_registry
from tunedeck.data.preflight_store import PREFLIGHTS
from tunedeck.db.models import utc_now
from tunedeck.db.request_rows import DatasetPreflight
from worker.dataset_preflight import run_dataset_preflight


def write_pairs(path, count: int = 10, long_every: int = 0):
    """`count` prompt/response records; every `long_every`-th has an answer past 64 tokens."""
    path.write_text("".join(json.dumps({
        "prompt": f"What is {n} + 1?",
        "response": "one two three " * 30 if long_every and n % long_every == 0 else str(n + 1),
    }) + "\n" for n in range(count)))
    return path


def serve_with_the_worker_function(client, preflight_id: int,
                                   worker_name: str = "test-worker") -> str:
    state = client.app_state
    return run_dataset_preflight(preflight_id, settings=state.settings, database=state.database,
                                 worker_name=worker_name)


def test_without_a_live_worker_it_answers_202_at_once_and_the_worker_fills_the_row(
        client, tmp_path, builtin_model_dir):  # noqa: F811
    data = write_pairs(tmp_path / "pairs.jsonl", count=10, long_every=5)
    started = time.monotonic()
    response = client.post("/api/datasets/preflight", json={"dataset": str(data), "seq_len": 64})
    assert response.status_code == 202 and time.monotonic() - started < 10
    pending = response.json()
    assert pending["status"] == "pending" and pending["report"] is None
    assert "no live worker serves queue 'default'" in pending["waiting"]
    assert response.headers["location"] == f"/api/datasets/preflight/{pending['id']}"
    [message] = list((tmp_path / "broker" / "queue").iterdir())
    assert b"tunedeck.preflight_dataset" in message.read_bytes()

    assert serve_with_the_worker_function(client, pending["id"]) == "done"
    done = client.get(f"/api/datasets/preflight/{pending['id']}").json()
    assert done["status"] == "done" and done["worker_name"] == "test-worker"
    assert done["request"]["dataset"] == str(data) and done["waiting"] is None
    report = done["report"]
    assert report["records"] == 10
    assert report["lose_answer_tokens"] == {"count": 2, "share": 0.2}
    assert [segment["part"] for segment in report["examples"][0]["segments"]] == \
        ["prompt", "trained", "cut"]
    with client.app_state.database.transaction() as session:
        [event] = audit.list_events(session=session, actor="local")
        assert (event.action, event.detail) == ("preflight", f"preflight {pending['id']}: "
                                                             f"dataset {data}")


def test_with_a_live_worker_the_post_waits_for_the_report(client, tmp_path,
                                                          builtin_model_dir):  # noqa: F811
    database = client.app_state.database
    with database.transaction() as session:
        worker_registry.record_heartbeat(session=session, name="w1", host="box",
                                         queues=["default"], pid=1, concurrency=1,
                                         resources={"gpus": None}, started_at=utc_now())
    stop = threading.Event()

    def worker() -> None:  # stands in for the worker's Celery thread
        while not stop.is_set():
            with database.transaction() as session:
                waiting = [preflight.id for preflight in session.query(DatasetPreflight)
                           .filter_by(status="pending")]
            for preflight_id in waiting:
                serve_with_the_worker_function(client, preflight_id, worker_name="w1")
            time.sleep(0.1)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        data = write_pairs(tmp_path / "pairs.jsonl")
        response = client.post("/api/datasets/preflight",
                               json={"dataset": str(data), "seq_len": 64, "packing": True})
    finally:
        stop.set()
        thread.join(timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "done" and answer["report"]["records"] == 10
    assert answer["report"]["packing"]["rows"] >= 1


def test_a_preflight_whose_worker_stopped_answering_says_so(client, tmp_path):
    response = client.post("/api/datasets/preflight", json={"seq_len": 64})
    with client.app_state.database.transaction() as session:
        PREFLIGHTS.claim(session=session, request_id=response.json()["id"], worker_name="gone")
    answer = client.get(response.headers["location"]).json()
    assert answer["status"] == "running"
    assert "worker gone took it and has stopped answering" in answer["waiting"]


@pytest.mark.parametrize("body, field, message", [
    ({"dataset": "/srv/elsewhere/train.jsonl"}, ["body", "dataset"], "outside the allowed folders"),
    ({"seq_len": 4}, ["body", "seq_len"], "greater than or equal to 8"),
    ({"max_steps": 3}, ["body", "max_steps"], "unknown field `max_steps`"),
    ({"columns": {"prompt": "q", "messages": "m"}}, ["body", "columns"], "not both"),
    ({"dataset_split": "train;drop"}, ["body", "dataset_split"], "should match pattern"),
    # The spec's rules between fields hold here too (the schema fuzzer found them a 500).
    ({"columns": {"chosen": "good"}}, ["body"], "set objective dpo"),
    ({"objective": "dpo", "packing": True}, ["body"], "turn packing off"),
])
def test_a_bad_request_is_422_naming_the_field_and_stores_nothing(client, body, field, message):
    response = client.post("/api/datasets/preflight", json=body)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == field and message in error["msg"]
    with client.app_state.database.transaction() as session:
        assert session.query(DatasetPreflight).count() == 0


def test_only_signed_in_users_ask_and_each_reads_only_their_own(client, tmp_path):
    database = client.app_state.database
    with database.transaction() as session:
        tokens = {}
        for name in ("alice", "bob"):
            accounts.create_user(session=session, name=name, password="correct horse battery")
            tokens[name] = accounts.create_api_token(session=session, user_name=name, label="t")
    alice, bob = ({"Authorization": f"Bearer {tokens[name]}"} for name in ("alice", "bob"))
    body = {"dataset": str(write_pairs(tmp_path / "pairs.jsonl")), "seq_len": 64}
    assert client.post("/api/datasets/preflight", json=body).status_code == 401
    refused = client.post("/api/datasets/preflight", json={**body, "trust_remote_code": True},
                          headers=alice)
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == \
        ["body", "trust_remote_code"]
    asked = client.post("/api/datasets/preflight", json=body, headers=alice)
    assert asked.status_code == 202
    preflight_id = asked.json()["id"]
    assert client.get(f"/api/datasets/preflight/{preflight_id}", headers=alice).status_code == 200
    hidden = client.get(f"/api/datasets/preflight/{preflight_id}", headers=bob)
    assert hidden.status_code == 404 and f"preflight {preflight_id} does not exist" in hidden.text
    assert client.get("/api/datasets/preflight/0", headers=alice).status_code == 422
    with database.transaction() as session:
        assert PREFLIGHTS.get(session=session, request_id=preflight_id).owner == "alice"
