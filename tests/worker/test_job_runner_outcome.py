"""How the worker judges a finished launch and records it: status, error text, failure kind
and rank on the row, and a one-line failure event."""
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder
from worker.supervision import Supervision
from worker.job_runner import judge_run, record_outcome

OOM_NOTICE = "out of memory on rank 1 (allocated 9.00 GB, reserved 10.00 GB): OutOfMemoryError: x"


def test_the_blamed_ranks_notice_is_the_error_even_after_a_peers_timeout(tmp_path):
    supervision = Supervision(error_notices=[(1.0, 0, "RuntimeError: NCCL timeout"),
                                             (2.0, 1, OOM_NOTICE)])
    outcome = judge_run(1, supervision, RunFolder(tmp_path))
    assert (outcome.outcome, outcome.error) == ("failed", f"rank 1: {OOM_NOTICE}")
    assert (outcome.failure.kind, outcome.failure.rank) == ("out_of_memory", 1)


def test_success_cancel_and_shutdown(tmp_path):
    run = RunFolder(tmp_path)
    run.merged_dir.mkdir()
    assert judge_run(0, Supervision(), run).outcome == "succeeded"
    assert judge_run(-15, Supervision(cancelled=True), run).outcome == "cancelled"
    shutdown = judge_run(0, Supervision(stopped_by_shutdown=True), run)
    assert (shutdown.outcome, shutdown.failure.kind) == ("failed", "worker_lost")


def test_the_row_gets_the_kind_the_rank_and_a_failure_event(database, tmp_path):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(tmp_path),
                                   worker_host="h")
    outcome = judge_run(1, Supervision(error_notices=[(2.0, 1, OOM_NOTICE)]), RunFolder(tmp_path))
    record_outcome(job_id, outcome, database=database)
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
        assert (job.status, job.failure_kind, job.failed_rank) == ("failed", "out_of_memory", 1)
        messages = [event.message for event in job_queries.list_job_events(session=session, job_id=job_id)]
    assert ("failure: out of memory on rank 1: allocated 9.00 GB, reserved 10.00 GB"
            in messages)
