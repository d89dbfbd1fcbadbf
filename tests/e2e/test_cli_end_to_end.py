"""The job page's commands from a terminal, each run as `tunedeck ...` (the installed
script) against a real `tunedeck up` on a host offline to the Hugging Face Hub (as the
tests' hosts are): jobs, status, logs (whole, tail, follow), watch, cancel, resume,
download, submit --set, lora-targets; and each error exit with the server's message."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

import yaml

from harness.servers import running_tunedeck

pytestmark = [pytest.mark.torchrun]

TUNEDECK = str(Path(sys.executable).parent / "tunedeck")
SHORT_JOB = {"name": "cli-lora", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
             "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 4,
             "learning_rate": 5e-3, "micro_batch_size": 4, "seq_len": 64, "precision": "bf16",
             "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_tunedeck(tmp_path_factory.mktemp("cli-up"),
                          extra_env={"HF_HUB_OFFLINE": "1"}) as server:
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


def spec_file(folder: Path, **changes) -> Path:
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump({**SHORT_JOB, **changes}))
    return path


def flat(text: str) -> str:
    """`status`'s lines with their padding folded: "downloads none yet"."""
    return " ".join(text.split())


def test_submit_set_changes_fields_and_an_uncached_hub_model_offline_says_how_to_fill_the_cache(
        server, tmp_path):
    submitted = tunedeck(server, "submit", spec_file(tmp_path, name="cli-offline"),
                         "--set", "model=tunedeck-test/not-cached", "--set", "lora.r=2",
                         "--set", "max_steps=7", "--set", "lora.target_modules=[q_proj, v_proj]")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout)
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"}, timeout_seconds=120)
    assert job["spec"]["lora"] == {**job["spec"]["lora"], "r": 2, "alpha": 8,
                                   "target_modules": ["q_proj", "v_proj"]}
    assert job["spec"]["max_steps"] == 7 and job["spec"]["model"] == "tunedeck-test/not-cached"
    # Not a file to fix: the model is not in the worker's cache and the host is offline.
    assert (job["status"], job["failure_kind"]) == ("failed", "not_cached_offline"), job
    status = flat(tunedeck(server, "status", job_id).stdout)
    assert "model tunedeck-test/not-cached: not in this host's Hugging Face cache" in status
    assert "HF_HUB_OFFLINE=1 forbids downloading it" in status
    assert "`hf download tunedeck-test/not-cached`" in status and "HF_HOME" in status
    assert "(not_cached_offline)" in status and "fix the file" not in status
    assert "lora · zero2 · 2 CPU ranks x 1 node · bf16" in status  # the worker has no GPU
    assert "downloads none: the job failed" in status
    refused = server.http.post(f"/api/jobs/{job_id}/retry")  # a new launch cannot help
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("nothing to change in the spec: model ")


def test_a_wrong_key_or_value_is_refused_naming_the_key_and_the_field_meant(server, tmp_path):
    spec = spec_file(tmp_path)
    for assignment, words in (
            ("lr=0.1", "lr: unknown field `lr`; did you mean `learning_rate`?"),
            ("lora.rr=4", "lora.rr: unknown field `rr`; did you mean `r`?"),
            ("lora.r=many", "lora.r: Input should be a valid integer"),
            ("max_steps", "--set max_steps: expected KEY=VALUE"),
            ("max_steps.x=1", "--set max_steps.x=1: max_steps is not a section")):
        refused = tunedeck(server, "submit", spec, "--set", assignment)
        assert refused.returncode != 0 and words in refused.stderr, (assignment, refused.stderr)
        assert str(spec) in refused.stderr
    typo = spec_file(tmp_path, fsdp={"cpu_offlaod": True})
    refused = tunedeck(server, "submit", typo)
    assert "fsdp.cpu_offlaod: unknown field `cpu_offlaod`; did you mean `cpu_offload`?" \
        in refused.stderr
    # The HTTP API's 422 says the same of the same key.
    response = server.http.post("/api/jobs", json={**SHORT_JOB, "lr": 0.1})
    assert response.status_code == 422
    assert [problem["msg"] for problem in response.json()["detail"]] == [
        "unknown field `lr`; did you mean `learning_rate`?"]


def test_lora_targets_prints_a_text_table_not_markdown(server, tmp_path):
    printed = tunedeck(server, "lora-targets", spec_file(tmp_path), timeout=180)
    assert printed.returncode == 0, printed.stderr
    counts, blank, header, *rows = printed.stdout.splitlines()
    assert counts.startswith("LlamaForCausalLM (llama): ") and " trainable parameters of " in counts
    assert blank == "" and header.split() == ["ADAPTED", "NAMES"]
    assert rows[0].startswith("linear layers (dropout 0)  ")
    assert "model.layers.*.self_attn.q_proj" in rows[0]
    assert "`" not in printed.stdout and "**" not in printed.stdout


def test_a_resumed_job_keeps_its_first_start_and_a_cancelled_one_has_no_downloads(server):
    job_id = server.submit({**SHORT_JOB, "name": "cli-resume", "max_steps": 100000,
                            "checkpoint_every_steps": 1, "keep_checkpoints": 1})
    deadline = time.monotonic() + 180
    while not server.http.get(f"/api/jobs/{job_id}/checkpoints").json():
        assert time.monotonic() < deadline, server.log_tail(job_id)
        assert server.job(job_id)["status"] in ("queued", "running"), server.job(job_id)
        time.sleep(0.5)
    assert tunedeck(server, "cancel", job_id).returncode == 0
    first = server.wait_for(job_id, {"cancelled", "failed", "succeeded"}, timeout_seconds=60)
    assert first["status"] == "cancelled"
    status = flat(tunedeck(server, "status", job_id).stdout)
    assert "downloads none: the job was cancelled" in status and "none yet" not in status
    assert "2 CPU ranks x 1 node" in status

    resumed = tunedeck(server, "resume", job_id)
    assert resumed.returncode == 0, resumed.stderr
    deadline = time.monotonic() + 180
    while (again := server.job(job_id))["attempts"] < 2 or again["status"] != "running":
        assert time.monotonic() < deadline, again
        assert again["status"] in ("queued", "running"), again
        time.sleep(0.5)
    assert again["started_at"] == first["started_at"]  # the job's start, kept
    assert again["claimed_at"] > first["claimed_at"]  # this run's own start
    started = next(line for line in tunedeck(server, "status", job_id).stdout.splitlines()
                   if line.split()[0] == "started")
    assert started.split()[1:] == datetime.fromisoformat(first["started_at"]).strftime(
        "%Y-%m-%d %H:%M:%S").split()
    assert tunedeck(server, "cancel", job_id).returncode == 0
    server.wait_for(job_id, {"cancelled", "failed", "succeeded"}, timeout_seconds=60)
