"""Every kind of worker request (a data preflight, a generation) through the one store, on
SQLite and PostgreSQL: a claim wins once, only a running row settles and a settled one stays
settled, a restarted worker fails only what its previous process was running, and the
state table is the one the store follows."""
from __future__ import annotations

import pytest

from tunedeck.jobs import store as job_store
from tunedeck.data.preflight_request import PreflightRequest
from tunedeck.data.preflight_store import PREFLIGHTS
from tunedeck.generation.request import GenerationRequest
from tunedeck.generation.store import GENERATIONS
from tunedeck.spec.job_spec import JobSpec
from tunedeck.worker_requests import states
from tunedeck.worker_requests.store import RequestNotFound


def new_request(database, kind: str, worker_name: str = "w") -> int:
    with database.transaction() as session:
        if kind == "preflight":
            return PREFLIGHTS.create(session=session, request=PreflightRequest(seq_len=64),
                                     owner="alice").id
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        return GENERATIONS.create(session=session, request=GenerationRequest.of_prompt("hi"),
                                  owner="alice", job_id=job_id, worker_name=worker_name).id


STORES = {"preflight": PREFLIGHTS, "generation": GENERATIONS}


@pytest.mark.parametrize("kind", STORES)
def test_a_claim_wins_once_and_only_a_running_row_settles_once(database, kind):
    store = STORES[kind]
    request_id = new_request(database, kind)
    with database.transaction() as session:
        store.finish(session=session, request_id=request_id, result={"early": True})
        assert store.get(session=session, request_id=request_id).status == states.PENDING
        claimed = store.claim(session=session, request_id=request_id, worker_name="w")
        assert claimed.status == states.RUNNING and claimed.started_at is not None
        assert store.claim(session=session, request_id=request_id, worker_name="other") is None
        store.finish(session=session, request_id=request_id, result={"n": 1})
        store.fail(session=session, request_id=request_id, error="late")
    with database.transaction() as session:
        row = store.to_dict(store.get(session=session, request_id=request_id))
    assert (row["status"], row[store.result], row["error"]) == ("done", {"n": 1}, None)
    assert row["worker_name"] == "w" and row["finished_at"] is not None
    assert row["request"]["seq_len" if kind == "preflight" else "variant"]


@pytest.mark.parametrize("kind", STORES)
def test_a_long_error_is_cut_and_a_missing_request_is_named(database, kind):
    store = STORES[kind]
    request_id = new_request(database, kind)
    with database.transaction() as session:
        store.claim(session=session, request_id=request_id, worker_name="w")
        store.fail(session=session, request_id=request_id, error="x" * 10_000)
    with database.transaction() as session:
        assert len(store.get(session=session, request_id=request_id).error) == 4000
        with pytest.raises(RequestNotFound, match=f"{kind} {request_id + 99} does not exist"):
            store.get(session=session, request_id=request_id + 99)


@pytest.mark.parametrize("kind", STORES)
def test_a_restarted_worker_fails_only_what_its_previous_process_was_running(database, kind):
    store = STORES[kind]
    running, waiting, elsewhere = (new_request(database, kind) for _ in range(3))
    with database.transaction() as session:
        store.claim(session=session, request_id=running, worker_name="w")
        store.claim(session=session, request_id=elsewhere, worker_name="other")
        assert store.fail_interrupted(session=session, worker_name="w", error="stopped") == 1
    with database.transaction() as session:
        assert store.get(session=session, request_id=running).status == states.FAILED
        assert store.get(session=session, request_id=waiting).status == states.PENDING
        assert store.get(session=session, request_id=elsewhere).status == states.RUNNING


def test_the_state_table_ends_in_done_or_failed():
    assert set(states.ALLOWED_TRANSITIONS) == set(states.STATUSES)
    assert states.sources_of(states.RUNNING) == (states.PENDING,)
    assert states.sources_of(states.DONE) == states.sources_of(states.FAILED) == (states.RUNNING,)
    assert all(not states.ALLOWED_TRANSITIONS[status] for status in states.FINISHED)
