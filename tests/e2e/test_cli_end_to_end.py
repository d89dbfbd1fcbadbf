"""The job page's commands from a terminal, each run as `tunedeck ...` (the installed
script) against a real `tunedeck up`: jobs, status, logs (whole, tail, follow), watch,
cancel, download; and each error exit with the server's message."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.servers import running_tunedeck

pytestmark = [pytest.mark.torchrun]

TUNEDECK = str(Path(sys.executable).parent / "tunedeck")
SHORT_JOB = {"name": "cli-lora", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
             "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 4,
             "learning_rate": 5e-3, "micro_batch_size": 4, "seq_len": 64, "precision": "bf16",
             "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_tunedeck(tmp_path_factory.mktemp("cli-up")) as server:
        yield server


@pytest.fixture(scope="module")
def finished_job(server):
    job_id = server.submit(SHORT_JOB)
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
    assert job["status"] == "succeeded", job["error"]
    return job_id


def tunedeck(server, *arguments, timeout=120, env=None, cwd=None) -> subprocess.CompletedProcess:
    """The command, told the server through TUNEDECK_URL (as a user's shell would)."""
    environment = {**os.environ, "TUNEDECK_URL": server.base_url, **(env or {})}
    return subprocess.run([TUNEDECK, *map(str, arguments)], capture_output=True, text=True,
                          timeout=timeout, env=environment, cwd=cwd)


def test_jobs_status_and_watch_show_the_finished_job(server, finished_job):
    listed = tunedeck(server, "jobs")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "STATUS", "METHOD", "STEP", "LOSS", "UPDATED"]
    row = next(row.split() for row in rows if row.split()[0] == str(finished_job))
    assert row[1:7] == ["cli-lora", "succeeded", "lora/zero2", "4", "/", "4"]
    assert float(row[7]) > 0  # the newest loss

    as_json = json.loads(tunedeck(server, "jobs", "--status", "succeeded", "--json").stdout)
    mine = next(job for job in as_json if job["id"] == finished_job)
    assert mine["latest"]["step"] == 4 and mine["latest"]["loss"] == pytest.approx(float(row[7]), abs=1e-4)
    assert all(job["status"] == "succeeded" for job in as_json)
    assert json.loads(tunedeck(server, "jobs", "--status", "queued", "--json").stdout) == []

    status = tunedeck(server, "status", finished_job)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"job {finished_job}  cli-lora  succeeded")
    assert "step 4 / 4 · loss " in status.stdout and "ETA" not in status.stdout
    assert "merged (" in status.stdout and "adapter (" in status.stdout
    detail = json.loads(tunedeck(server, "status", finished_job, "--json").stdout)
    assert detail["latest"]["step"] == 4 and set(detail["artifacts"]) == {"merged", "adapter"}

    watched = tunedeck(server, "watch", finished_job, "--interval", "0.2")
    assert watched.returncode == 0, watched.stderr
    assert f"[####################] 100% job {finished_job} succeeded · step 4 / 4 · loss " \
        in watched.stdout


def test_logs_whole_tail_and_follow_of_a_finished_job(server, finished_job):
    whole = tunedeck(server, "logs", finished_job)
    assert whole.returncode == 0, whole.stderr
    lines = whole.stdout.splitlines()
    assert len(lines) > 3 and any("[default0]" in line for line in lines), lines[:5]
    tail = tunedeck(server, "logs", finished_job, "--tail", "3")
    assert tail.stdout.splitlines() == lines[-3:]
    # A finished job's log, followed: all of it, then the command ends by itself.
    followed = tunedeck(server, "logs", finished_job, "--follow", timeout=30)
    assert followed.returncode == 0 and followed.stdout == whole.stdout


def test_download_unpacks_merged_and_adapter_and_keeps_a_full_folder(server, finished_job,
                                                                     tmp_path):
    merged = tunedeck(server, "download", finished_job, cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    folder = tmp_path / f"job-{finished_job}-merged"
    assert (folder / "config.json").is_file() and list(folder.glob("*.safetensors"))
    adapter = tunedeck(server, "download", finished_job, "--adapter", "--out", tmp_path / "lora")
    assert adapter.returncode == 0 and (tmp_path / "lora" / "adapter_config.json").is_file()

    again = tunedeck(server, "download", finished_job, "--adapter", "--out", tmp_path / "lora")
    assert again.returncode != 0 and "not an empty folder; pass --force" in again.stderr
    forced = tunedeck(server, "download", finished_job, "--adapter", "--out", tmp_path / "lora",
                      "--force")
    assert forced.returncode == 0, forced.stderr


def test_follow_a_running_job_then_cancel_it(server):
    job_id = server.submit({**SHORT_JOB, "name": "cli-cancel", "max_steps": 100000})
    follower = subprocess.Popen([TUNEDECK, "logs", str(job_id), "--follow", "--interval", "0.2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "TUNEDECK_URL": server.base_url})
    try:
        deadline = time.monotonic() + 180
        while not server.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]:
            assert time.monotonic() < deadline, server.log_tail(job_id)
            assert server.job(job_id)["status"] in ("queued", "running"), server.job(job_id)
            time.sleep(0.5)
        running = tunedeck(server, "status", job_id)
        assert " running" in running.stdout.splitlines()[0] and "ETA " in running.stdout
        cancelled = tunedeck(server, "cancel", job_id)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.startswith(f"job {job_id} ")
        job = server.wait_for(job_id, {"cancelled", "failed", "succeeded"}, timeout_seconds=60)
        assert job["status"] == "cancelled"
        out, err = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    # What was followed is the log as the server holds it at the end, byte for byte.
    assert out == tunedeck(server, "logs", job_id).stdout and "[default0]" in out

    refused = tunedeck(server, "download", job_id)
    assert refused.returncode != 0
    assert refused.stderr.strip() == (f"cannot download the merged weights of job {job_id}: "
                                      f"job {job_id} has no merged artifact (status cancelled)")


def test_errors_exit_non_zero_with_the_servers_message(server):
    for command in (["status", 99999], ["logs", 99999], ["logs", 99999, "--follow"],
                    ["watch", 99999], ["cancel", 99999], ["download", 99999]):
        result = tunedeck(server, *command)
        assert result.returncode != 0, command
        assert result.stderr.strip().endswith(": job 99999 does not exist"), (command, result.stderr)
    refused = tunedeck(server, "jobs", "--limit", 0)
    assert refused.returncode != 0 and "limit: " in refused.stderr
    # --server wins over TUNEDECK_URL.
    unreachable = tunedeck(server, "jobs", "--server", "http://127.0.0.1:9")
    assert unreachable.returncode != 0
    assert "cannot reach TuneDeck at http://127.0.0.1:9" in unreachable.stderr
