"""The store and its state machine, on SQLite and (marked) PostgreSQL."""
import pytest
from sqlalchemy import func, select

from tunedeck.db.models import MetricPoint
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.states import ALLOWED_TRANSITIONS, FINISHED_STATUSES, InvalidTransition
from tunedeck.metrics import store as metric_store

SPEC = JobSpec(name="store-test", max_steps=3)


def new_job(database) -> int:
    with database.transaction() as session:
        return job_store.create_job(session=session, spec=SPEC).id


def test_created_job_is_queued_with_spec_stored_unchanged(database):
    job_id = new_job(database)
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
        assert job.status == "queued" and job.name == "store-test"
        assert JobSpec.model_validate(job.spec) == SPEC
        assert [e.message for e in job_queries.list_job_events(session=session, job_id=job_id)] == ["queued"]


def test_an_unnamed_job_is_named_for_its_model_method_and_backend_and_told_apart_by_id(database):
    unnamed = JobSpec(model="Qwen/Qwen2-0.5B", method="qlora", backend="zero2", max_steps=3)
    with database.transaction() as session:
        first, second = (job_store.create_job(session=session, spec=unnamed) for _ in range(2))
        names = [first.name, second.name]
    assert names == [f"Qwen2-0.5B-qlora-zero2-{first.id}", f"Qwen2-0.5B-qlora-zero2-{second.id}"]


def test_a_model_reference_gives_its_last_part_as_the_name_stem():
    from tunedeck.spec.job_spec import model_stem

    assert [model_stem(model) for model in ("builtin:tiny-llama", "Qwen/Qwen2-0.5B",
                                            "/models/qwen2-0.5b/", "gpt2")] == \
        ["tiny-llama", "Qwen2-0.5B", "qwen2-0.5b", "gpt2"]


def test_happy_path_and_finished_jobs_never_change(database):
    job_id = new_job(database)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r", worker_host="h")
        job_store.mark_job_succeeded(session=session, job_id=job_id)
    for change in (lambda s: job_store.mark_job_failed(session=s, job_id=job_id, error="x"),
                   lambda s: job_store.mark_job_running(session=s, job_id=job_id, run_dir="/r", worker_host="h"),
                   lambda s: job_store.mark_job_cancelled(session=s, job_id=job_id)):
        with pytest.raises(InvalidTransition, match="is succeeded"):
            with database.transaction() as session:
                change(session)
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
        assert job.status == "succeeded" and job.finished_at is not None and job.error is None


def test_a_job_is_claimed_once(database):
    job_id = new_job(database)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r", worker_host="a")
    with pytest.raises(InvalidTransition):
        with database.transaction() as session:
            job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r", worker_host="b")


def test_failure_keeps_its_error_text(database):
    job_id = new_job(database)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r", worker_host="h")
        job_store.mark_job_failed(session=session, job_id=job_id, error="dataset /x.jsonl: no such file")
    with database.transaction() as session:
        assert job_queries.get_job(session=session, job_id=job_id).error == "dataset /x.jsonl: no such file"


def test_cancel_queued_ends_at_once_and_running_sets_the_flag(database):
    queued_id, running_id = new_job(database), new_job(database)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=running_id, run_dir="/r", worker_host="h")
    with database.transaction() as session:
        assert job_store.request_cancel(session=session, job_id=queued_id).status == "cancelled"
        running = job_store.request_cancel(session=session, job_id=running_id)
        assert running.status == "running" and running.cancel_requested
        # What a supervising worker reads: (cancel requested, still ours).
        assert job_queries.run_control(session=session, job_id=running_id,
                                       worker_name=None) == (True, True)
        assert job_queries.run_control(session=session, job_id=queued_id,
                                       worker_name=None) == (False, False)


def test_missing_job_is_a_named_error(database):
    with pytest.raises(job_queries.JobNotFound, match="job 999 does not exist"):
        with database.transaction() as session:
            job_queries.get_job(session=session, job_id=999)


def test_state_machine_table_is_closed():
    assert ALLOWED_TRANSITIONS["succeeded"] == frozenset()
    for status in FINISHED_STATUSES - {"succeeded"}:
        assert ALLOWED_TRANSITIONS[status] == frozenset({"queued"})  # Resume, only
    assert set(ALLOWED_TRANSITIONS) == {"queued", "running", "succeeded", "failed", "cancelled"}


def test_resume_requeues_a_failed_or_cancelled_job_and_counts_attempts(database):
    failed_id, cancelled_id, succeeded_id = new_job(database), new_job(database), new_job(database)
    with database.transaction() as session:
        for job_id in (failed_id, succeeded_id):
            job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r", worker_host="h")
        job_store.mark_job_failed(session=session, job_id=failed_id, error="worker lost")
        job_store.mark_job_succeeded(session=session, job_id=succeeded_id)
        job_store.request_cancel(session=session, job_id=cancelled_id)
    with database.transaction() as session:
        for job_id in (failed_id, cancelled_id):
            job = job_store.resume_job(session=session, job_id=job_id, checkpoint_step=10)
            assert job.status == "queued" and job.resume_requested and job.error is None
            assert job.finished_at is None and not job.cancel_requested
        with pytest.raises(InvalidTransition, match="is succeeded"):
            job_store.resume_job(session=session, job_id=succeeded_id, checkpoint_step=10)
    with database.transaction() as session:
        job = job_store.mark_job_running(session=session, job_id=failed_id, run_dir="/r", worker_host="h")
        assert job.attempts == 2
        messages = [e.message for e in job_queries.list_job_events(session=session, job_id=failed_id)]
        assert "resume requested from the checkpoint at step 10" in messages


def test_metric_points_are_idempotent_and_read_back_as_series(database):
    job_id = new_job(database)
    events = [
        (0, {"kind": "step", "rank": 0, "time": 1.0, "step": 1, "loss": 2.5, "learning_rate": 1e-3,
             "grad_norm": 0.7, "tokens_per_second": 100.0, "step_seconds": 0.1, "tokens": 10}),
        (1, {"kind": "memory", "rank": 0, "time": 1.0, "step": 1, "host": "h", "device": "cpu",
             "allocated_mb": None, "reserved_mb": None, "peak_mb": None, "rss_mb": 300.0}),
        (0, {"kind": "step", "rank": 1, "time": 1.0, "step": 1, "loss": 2.5}),
        (1, {"kind": "memory", "rank": 1, "time": 1.1, "step": 1, "rss_mb": 310.0}),
    ]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
    with database.transaction() as session:  # a re-read of the same lines adds nothing
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
    with database.transaction() as session:
        metrics = metric_store.read_job_metrics(session=session, job_id=job_id)
        stored = session.scalar(select(func.count()).where(MetricPoint.job_id == job_id))
        assert stored == 4
        newest = metric_store.newest_step_rows(session=session, job_ids=[job_id])
        assert newest[job_id]["loss"] == 2.5
    assert [row["step"] for row in metrics["train"]] == [1]
    assert metrics["train"][0]["tokens_per_second"] == 100.0
    assert [(row["rank"], row["rss_mb"]) for row in metrics["memory"]] == [(0, 300.0), (1, 310.0)]


def test_a_resumed_job_keeps_its_first_start_and_records_its_new_claim(database):
    job_id = new_job(database)
    with database.transaction() as session:
        first = job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r",
                                           worker_host="h")
        started_at, first_claim = first.started_at, first.claimed_at
        assert started_at == first_claim
        job_store.mark_job_cancelled(session=session, job_id=job_id)
        job_store.resume_job(session=session, job_id=job_id, checkpoint_step=2)
    with database.transaction() as session:
        again = job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r",
                                           worker_host="h")
        assert again.started_at == started_at and again.claimed_at > first_claim
        # A starting worker's recovery goes by the claim: this one is new, not left over.
        assert job_queries.list_running_jobs(session=session, worker_host="h",
                                           claimed_before=first_claim) == []
