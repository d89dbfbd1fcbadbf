"""Failure reasons in the API and on the pages, and "Retry with…": a real SQLite database and
the real server-less broker (no worker runs), job rows failed through the store."""
import html

import gradio as gr

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.job_ids import job_link
from app.ui.job_page import job_actions
from app.ui.job_page.job_handlers import error_html, load_job_page
from app.ui.jobs.jobs_table import jobs_table
from app.ui.job_page.failure_panel import show_failure
from app.views.failure import failure_html, failure_view, rank_log_tail
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.run_folder import RunFolder
from tests.hub_cache import offline_hub, offline_hub_error  # noqa: F401

SPEC = {"name": "oom-job", "num_gpus": 2, "max_steps": 10, "micro_batch_size": 8,
        "backend": "fsdp", "learning_rate": 1e-3, "precision": "fp16"}


def failed_job(client, tmp_path, *, kind: str, rank: int | None, error: str = "boom") -> int:
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    run = RunFolder(tmp_path / "runs" / f"job-{job_id}")
    with client.app_state.database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
        job_store.mark_job_failed(session=session, job_id=job_id, error=error,
                                  failure_kind=kind, failed_rank=rank)
    return job_id


def write_rank_logs(tmp_path, job_id: int, rank: int, lines: int) -> None:
    folder = (RunFolder(tmp_path / "runs" / f"job-{job_id}").rank_logs_dir
              / "abc_1" / "attempt_0" / str(rank))
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text("".join(f"step {n}\n" for n in range(lines)))
    (folder / "stderr.log").write_text("Traceback\nMemoryError\n")


def test_the_job_row_says_why_and_which_rank(client, tmp_path):
    job_id = failed_job(client, tmp_path, kind="out_of_memory", rank=1)
    job = client.get(f"/api/jobs/{job_id}").json()
    assert (job["failure_kind"], job["failed_rank"]) == ("out_of_memory", 1)
    queued = client.post("/api/jobs", json=SPEC).json()
    assert (queued["failure_kind"], queued["failed_rank"]) == (None, None)


def test_retry_after_out_of_memory_is_a_new_job_with_the_planners_change(client, tmp_path):
    job_id = failed_job(client, tmp_path, kind="out_of_memory", rank=1)
    response = client.post(f"/api/jobs/{job_id}/retry")
    assert response.status_code == 201, response.text
    retried = response.json()
    assert retried["id"] != job_id and retried["status"] == "queued"
    # The planner's fastest set-up under the job's own backend: half the micro-batch with
    # twice the accumulation (no recomputed forward), the same examples a step.
    change = "fsdp + micro-batch 4 x grad_accum 2"
    assert retried["name"] == f"oom-job (retry: {change})"
    assert (retried["spec"]["micro_batch_size"], retried["spec"]["grad_accum"]) == (4, 2)
    assert (retried["retry_of"], retried["change"]) == (job_id, change)
    events = [event["message"] for event in client.get(f"/api/jobs/{job_id}/events").json()]
    assert f"retried as job {retried['id']} ({change})" in events
    assert len(list((tmp_path / "broker" / "queue").iterdir())) == 2  # submit, then retry


def test_retry_after_nan_loss_lowers_the_rate_and_leaves_fp16(client, tmp_path):
    job_id = failed_job(client, tmp_path, kind="nan_loss", rank=0)
    retried = client.post(f"/api/jobs/{job_id}/retry").json()
    assert retried["spec"]["learning_rate"] == 1e-4 and retried["spec"]["precision"] == "bf16"


def test_retry_is_409_for_an_input_error_and_for_a_job_that_did_not_fail(client, tmp_path):
    job_id = failed_job(client, tmp_path, kind="input_error", rank=None,
                        error="dataset /x.jsonl: no such file")
    response = client.post(f"/api/jobs/{job_id}/retry")
    assert response.status_code == 409
    assert response.json()["detail"] == "fix the file first: dataset /x.jsonl: no such file"
    queued = client.post("/api/jobs", json=SPEC).json()["id"]
    assert client.post(f"/api/jobs/{queued}/retry").status_code == 409
    assert client.post("/api/jobs/999/retry").status_code == 404


def test_the_jobs_table_and_the_page_show_the_reason_the_rank_log_and_the_retry(client, tmp_path):
    database = client.app_state.database
    job_id = failed_job(client, tmp_path, kind="out_of_memory", rank=1)
    write_rank_logs(tmp_path, job_id, rank=1, lines=50)
    row = jobs_table(database=database, principal=OPEN_PRINCIPAL).set_index("id").loc[job_link(job_id)]
    assert ">out of memory (rank 1): boom</span>" in row["reason"]
    page = load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert page.failure.reason == "out of memory (rank 1)"
    assert page.failure.retry_label == "Retry with fsdp + micro-batch 4 x grad_accum 2"
    log = page.failure.rank_log.splitlines()
    assert log[0] == "--- rank 1 stdout.log ---" and log[1] == "step 20" and log[-1] == "MemoryError"
    assert failure_html(page.failure) == (
        '<p style="margin:0"><strong>Why it failed:</strong> out of memory (rank 1)</p>')
    message = job_actions.retry_from_page(job_id, database=database,
                                          celery_app=client.app_state.celery_app, principal=OPEN_PRINCIPAL)
    assert message.startswith("Retried as job ") and "(fsdp + micro-batch 4 x grad_accum 2)" in message


def test_no_failure_panel_for_other_jobs_and_no_retry_for_input_errors(client, tmp_path):
    database = client.app_state.database
    queued = client.post("/api/jobs", json=SPEC).json()["id"]
    assert not load_job_page(queued, database=database, principal=OPEN_PRINCIPAL).failure.reason
    job_id = failed_job(client, tmp_path, kind="input_error", rank=None, error="model /m: no such folder")
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
    view = failure_view(job)
    assert (view.reason, view.retryable) == ("input error", False)
    # The page shows the error just above: the refusal does not say it again.
    assert "No retry: fix the file first: the error above says what</p>" in failure_html(view)
    assert rank_log_tail(job, None) == ""


def test_a_failure_quoting_a_url_is_escaped_once_where_the_page_draws_it(client, tmp_path,
                                                                          offline_hub_error):
    # The refusal quotes the error; in a Markdown panel an entity of html.escape's was linked
    # as part of the URL ("'https://huggingface.co&#x27;").
    error = f"OSError: {offline_hub_error}"
    job_id = failed_job(client, tmp_path, kind="input_error", rank=None, error=error)
    page = load_job_page(job_id, database=client.app_state.database, principal=OPEN_PRINCIPAL)
    panel = failure_html(page.failure)
    assert isinstance(show_failure(page.failure)[0], gr.HTML)  # escaped for what draws it
    assert "No retry: fix the file first: the error above says what</p>" in panel
    assert "huggingface.co" not in panel  # the error box above quotes it, once
    assert f"<pre style=\"white-space:pre-wrap;margin:8px 0 0\">{html.escape(error)}</pre>" \
        in error_html(page.error)
