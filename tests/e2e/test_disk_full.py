"""The runs folder's disk fills up, for real: a small tmpfs mounted as TUNEDECK_HOME/runs
(root only; CI runs as root), the real `tunedeck up` (web, Celery worker, torchrun with a
CPU rank), the service log on that disk too.

A job that fills the disk mid-run fails, soon, as `disk_full` with the room left in its
reason, its half-written checkpoint never the latest; its Retry waits in the queue, saying
the disk is too small, and runs by itself once the disk is grown. Each phase records what
the API answered meanwhile: every HTTP status, and the job's statuses in order."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.servers import RunningServer, running_tunedeck, wait_until
from harness.small_disk import mount_problem, small_disk
from tunedeck.run_folder import RunFolder

pytestmark = [pytest.mark.torchrun,
              pytest.mark.skipif(mount_problem() is not None, reason=str(mount_problem()))]

MB = 10**6
DISK_BYTES, GROWN_DISK_BYTES = 64 * MB, 128 * MB
STEPS, EVERY = 40, 20
# One CPU rank under FSDP, steps of ~0.1 s: 2 s between checkpoints to fill the disk in.
JOB = {"name": "disk-full", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
       "method": "lora", "backend": "fsdp", "num_gpus": 1, "max_steps": STEPS,
       "checkpoint_every_steps": EVERY, "keep_checkpoints": 2, "learning_rate": 5e-3,
       "micro_batch_size": 4, "seq_len": 64, "precision": "bf16",
       "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}
# The waiting job is sent again 2 s after a worker held it (the sweep runs every beat).
FAST_SWEEP = {"TUNEDECK_HEARTBEAT_SECONDS": "1", "TUNEDECK_REDISPATCH_SECONDS": "2"}
DISK_ADVICE = "free space, lower keep_checkpoints, or move TUNEDECK_HOME"
FINISHED = {"succeeded", "failed", "cancelled"}


@dataclass
class ApiRecord:
    """What GET /api/jobs/{id} answered while the disk was full: HTTP statuses seen, and the
    job's statuses in the order seen (each once per run of them)."""

    http_statuses: set[int] = field(default_factory=set)
    job_statuses: list[str] = field(default_factory=list)

    def poll(self, server: RunningServer, job_id: int) -> dict:
        response = server.http.get(f"/api/jobs/{job_id}")
        self.http_statuses.add(response.status_code)
        job = response.json()
        if not self.job_statuses or self.job_statuses[-1] != job["status"]:
            self.job_statuses.append(job["status"])
        return job

    def until(self, server: RunningServer, job_id: int, statuses: set[str],
              timeout_seconds: float) -> dict:
        return wait_until(lambda: (job := self.poll(server, job_id))["status"] in statuses
                          and job, timeout_seconds, f"job {job_id} to be {statuses}")


def test_a_full_runs_disk_fails_the_job_by_name_and_its_retry_waits_for_room(tmp_path):
    home = tmp_path / "home"
    with small_disk(home / "runs", DISK_BYTES) as disk:
        (home / "up.log").symlink_to(disk.path / "up.log")  # the services' log: same disk
        with running_tunedeck(home, extra_env=FAST_SWEEP) as server:
            failed_id = _a_job_that_fills_the_disk_mid_run(server, disk)
            _its_retry_waits_for_room_then_runs(server, disk, failed_id)


def _a_job_that_fills_the_disk_mid_run(server: RunningServer, disk) -> int:
    job_id = server.submit(JOB)
    run = RunFolder(disk.path / f"job-{job_id}")
    record = ApiRecord()
    # Room for the job at its start; once its first checkpoint is complete, the disk is
    # filled until half a checkpoint is left, so the next one cannot be written whole.
    wait_until(lambda: record.poll(server, job_id)["status"] in FINISHED
               or run.completed_checkpoints(), 180, f"job {job_id}'s first checkpoint")
    first_step, first = run.completed_checkpoints()[0]
    checkpoint_bytes = sum(path.stat().st_size for path in first.rglob("*") if path.is_file())
    disk.fill_leaving(checkpoint_bytes // 2)
    filled_at = time.monotonic()
    job = record.until(server, job_id, FINISHED, 120)
    seconds_to_fail = time.monotonic() - filled_at
    print(f"\njob {job_id}: {record.job_statuses} (HTTP {sorted(record.http_statuses)}); failed "
          f"{seconds_to_fail:.1f} s after the disk filled; reason: {job['error'][:300]!r}")

    assert record.http_statuses == {200}
    assert record.job_statuses[-2:] == ["running", "failed"]
    assert (job["status"], job["failure_kind"]) == ("failed", "disk_full"), job["error"]
    assert re.match(rf"the disk under {re.escape(str(run.path))} is full \([\d,]+\.\d MB free\): "
                    rf"{re.escape(DISK_ADVICE)}$", job["error"].splitlines()[0]), job["error"]
    assert seconds_to_fail < 60  # it fails; it does not hang
    # The checkpoint being written when the disk filled never became the latest: the API
    # lists complete ones only, and the worker cleared the half-written folder.
    checkpoints = server.http.get(f"/api/jobs/{job_id}/checkpoints").json()
    assert checkpoints and checkpoints[0]["step"] == first_step == EVERY, checkpoints
    assert [path.name for path in run.checkpoints_dir.iterdir()] == [first.name]
    _assert_steps_once_each(server, job_id, at_least=first_step)
    return job_id


def _its_retry_waits_for_room_then_runs(server: RunningServer, disk, failed_id: int) -> None:
    retried = server.http.post(f"/api/jobs/{failed_id}/retry")
    assert retried.status_code == 201, retried.text  # Retry is offered, with the same spec
    assert retried.json()["change"] == "same spec"
    job_id = retried.json()["id"]
    record = ApiRecord()
    events = lambda: [event["message"] for event in  # noqa: E731
                      server.http.get(f"/api/jobs/{job_id}/events").json()]
    reason = wait_until(lambda: next((message for message in events()
                                      if "is too small for this job" in message), None)
                        if record.poll(server, job_id) else None, 30, "the disk hold")
    time.sleep(4)  # two more claims (one every 2 s): it stays queued
    record.poll(server, job_id)
    print(f"job {job_id} held: {reason!r}; /api/workers says: "
          f"{[job['waiting'] for job in server.http.get('/api/workers').json()['queued']]}")
    assert record.job_statuses == ["queued"]
    # The cluster page and the Jobs table say what the worker said.
    (waiting,) = [job["waiting"] for job in server.http.get("/api/workers").json()["queued"]
                  if job["id"] == job_id]
    assert waiting == reason
    assert re.fullmatch(rf"waiting: the disk under {re.escape(str(disk.path))} is too small for "
                        rf"this job \([\d,]+\.\d MB free, [\d,]+\.\d MB needed\): "
                        rf"{re.escape(DISK_ADVICE)}", reason), reason

    disk.remount(GROWN_DISK_BYTES)
    grown_at = time.monotonic()
    job = record.until(server, job_id, FINISHED, 180)
    print(f"job {job_id}: {record.job_statuses} (HTTP {sorted(record.http_statuses)}); "
          f"{job['status']} {time.monotonic() - grown_at:.1f} s after the disk grew")
    assert job["status"] == "succeeded", job["error"]
    assert record.job_statuses == ["queued", "running", "succeeded"]
    assert record.http_statuses == {200}
    _assert_steps_once_each(server, job_id, at_least=STEPS, at_most=STEPS)
    # The worker that lived through the full disk is the one that ran it.
    assert [worker["state"] for worker in server.http.get("/api/workers").json()["workers"]] \
        == ["online"]


def _assert_steps_once_each(server: RunningServer, job_id: int, *, at_least: int,
                            at_most: int | None = None) -> None:
    steps = [point["step"] for point in server.http.get(
        f"/api/jobs/{job_id}/metrics", params={"max_points": 100000}).json()["train"]]
    assert steps == list(range(1, len(steps) + 1)), steps
    assert at_least <= len(steps) <= (at_most or STEPS), steps
