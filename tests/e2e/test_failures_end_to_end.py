"""Failures explained, from real failing runs through the real `tunedeck up` (HTTP, Celery
worker, torchrun with 2 CPU ranks): the kind and the rank on the job row, the failed rank's
own log, and the spec "Retry with…" makes."""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from harness.servers import running_tunedeck, stand_in_trainer_environment
from tests.e2e.test_up_end_to_end import _job_processes, _wait_for_first_step
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.retry_changes import memory_retry
from tunedeck.run_folder import RunFolder
from worker.sampler import rank_of_process

pytestmark = [pytest.mark.torchrun]

JOB = {"name": "failing", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
       "method": "lora", "backend": "fsdp", "num_gpus": 2, "max_steps": 40,
       "micro_batch_size": 4, "seq_len": 64, "precision": "bf16"}
# Measured: a full fine-tune in fp16 at the spec's largest learning rate overflows to NaN
# by step 5 (fp32 and bf16 stay finite: Adam's steps are bounded by the learning rate).
NAN_JOB = {**JOB, "name": "nan", "method": "full", "precision": "fp16", "learning_rate": 1.0,
           "max_grad_norm": 0, "lr_schedule": "constant"}
FINISHED = {"succeeded", "failed", "cancelled"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_tunedeck(tmp_path_factory.mktemp("failures")) as server:
        yield server


def _events(server, job_id: int) -> list[str]:
    return [event["message"] for event in server.http.get(f"/api/jobs/{job_id}/events").json()]


def _rank_log(server, job_id: int, rank: int) -> str:
    run = RunFolder(server.home / "runs" / f"job-{job_id}")
    return "".join(path.read_text() for path in run.rank_log_files(rank))


def _retry_and_cancel(server, job_id: int) -> dict:
    response = server.http.post(f"/api/jobs/{job_id}/retry")
    assert response.status_code == 201, response.text
    retried = response.json()
    server.http.post(f"/api/jobs/{retried['id']}/cancel")  # the retry itself is not under test
    assert f"retried as job {retried['id']} ({retried['change']})" in _events(server, job_id)
    return retried


def test_a_nan_loss_is_explained_and_retried_with_a_tenth_of_the_rate_in_bf16(server):
    job_id = server.submit(NAN_JOB)
    job = server.wait_for(job_id, FINISHED)
    assert (job["status"], job["failure_kind"]) == ("failed", "nan_loss"), job["error"]
    assert job["failed_rank"] in (0, 1) and f"rank {job['failed_rank']}: FloatingPointError" in job["error"]
    assert "FloatingPointError: loss became nan" in _rank_log(server, job_id, job["failed_rank"])
    retried = _retry_and_cancel(server, job_id)
    assert retried["change"] == "learning rate 0.1 and bf16"
    assert retried["name"] == "nan (retry: learning rate 0.1 and bf16)"
    expected = {**NAN_JOB, "learning_rate": 0.1, "precision": "bf16", "name": retried["name"]}
    assert retried["spec"] == JobSpec.model_validate(expected).model_dump(mode="json")


def test_a_missing_dataset_is_an_input_error_that_retry_refuses(server, tmp_path):
    missing = tmp_path / "nonexistent" / "train.jsonl"  # inside the allowed roots
    job_id = server.submit({**JOB, "dataset": str(missing)})
    job = server.wait_for(job_id, FINISHED, timeout_seconds=60)
    assert (job["failure_kind"], job["failed_rank"]) == ("input_error", None)
    response = server.http.post(f"/api/jobs/{job_id}/retry")
    assert response.status_code == 409
    assert response.json()["detail"].startswith("fix the file first: ")
    assert str(missing) in response.json()["detail"]


def test_a_sigkilled_rank_is_named_and_retried_with_the_same_spec(server):
    job_id = server.submit({**JOB, "name": "sigkill", "max_steps": 100000})
    _wait_for_first_step(server, job_id)
    rank_1 = next(pid for pid in _job_processes(server, job_id)
                  if rank_of_process(psutil.Process(pid)) == 1)
    os.kill(rank_1, signal.SIGKILL)
    job = server.wait_for(job_id, FINISHED, timeout_seconds=120)
    assert (job["status"], job["failure_kind"], job["failed_rank"]) == \
        ("failed", "killed_by_signal", 1), job["error"]
    assert "failure: killed by a signal on rank 1: SIGKILL" in _events(server, job_id)
    assert _job_processes(server, job_id) == []
    retried = _retry_and_cancel(server, job_id)
    assert retried["change"] == "same spec"
    assert {**retried["spec"], "name": "sigkill"} == job["spec"]


def test_a_rank_that_runs_out_of_memory_is_named_and_retried_with_the_planners_change(tmp_path):
    """The ranks run tests/e2e/oom_trainer, which replaces only `trainer.train`: rank 1
    allocates until a real MemoryError, and the real entry point writes the trainer's error
    notice."""
    spec = {**JOB, "name": "oom", "micro_batch_size": 8}
    with running_tunedeck(tmp_path / "home",
                          extra_env=stand_in_trainer_environment("tests.e2e.oom_trainer")) as server:
        job_id = server.submit(spec)
        started = time.monotonic()
        job = server.wait_for(job_id, FINISHED, timeout_seconds=120)
        assert (job["status"], job["failure_kind"], job["failed_rank"]) == \
            ("failed", "out_of_memory", 1), job["error"]
        assert job["error"].startswith("rank 1: out of memory on rank 1: MemoryError")
        assert "MemoryError" in _rank_log(server, job_id, 1)
        retried = _retry_and_cancel(server, job_id)
    expected = memory_retry(JobSpec.model_validate(spec))
    # The planner's fastest set-up under the job's own backend that fits a card as large as
    # the job's planned need.
    assert retried["change"] == expected.label == "fsdp + activation checkpointing"
    assert retried["spec"]["fsdp"]["activation_checkpointing"] is True
    assert time.monotonic() - started < 120
