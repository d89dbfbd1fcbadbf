"""The whole path through the real `tunedeck up`: HTTP submit, Celery worker, real torchrun
with 2 CPU ranks, metrics in the database, merged weights downloaded and loaded."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import zipfile

import pytest

from harness.servers import running_tunedeck

pytestmark = [pytest.mark.torchrun]

LORA_JOB = {"name": "e2e-lora", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
            "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 12,
            "learning_rate": 5e-3, "micro_batch_size": 8, "seq_len": 64, "precision": "bf16",
            "lr_schedule": "linear", "weight_decay": 0.01, "max_grad_norm": 0.5,
            "zero2": {"activation_checkpointing": True},
            "lora": {"r": 8, "alpha": 16, "dropout": 0.0}}


# A user's own project, with a `trainer` package of its own, is where TuneDeck is started:
# were it imported anywhere (the worker, the warm start, a rank), it would leave its mark.
DECOY_TRAINER = """from pathlib import Path
Path(__file__).parents[1].joinpath("decoy-trainer-ran").write_text("imported")
raise SystemExit("the decoy trainer was imported")
"""


@pytest.fixture(scope="module")
def decoy_project(tmp_path_factory):
    project = tmp_path_factory.mktemp("user-project")
    (project / "trainer").mkdir()
    (project / "trainer" / "__init__.py").write_text(DECOY_TRAINER)
    return project


@pytest.fixture(scope="module")
def server(tmp_path_factory, decoy_project):
    with running_tunedeck(tmp_path_factory.mktemp("up"), cwd=decoy_project) as server:
        yield server


def test_submit_train_download_and_load_merged_weights(server, tmp_path):
    job_id = server.submit(LORA_JOB)
    # `tunedeck watch` follows it to the end, a line each time its progress changes.
    watched = subprocess.run([sys.executable, "-m", "cli", "watch", str(job_id),
                              "--server", server.base_url, "--interval", "0.2"],
                             capture_output=True, text=True, timeout=300)
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
    assert job["status"] == "succeeded", job["error"]
    assert watched.returncode == 0, watched.stdout + watched.stderr
    lines = watched.stdout.splitlines()
    assert f"job {job_id} succeeded · step 12 / 12 · loss " in lines[-1], lines
    assert "tokens/s" in lines[-1], lines
    assert any(f"job {job_id} running" in line for line in lines), lines

    metrics = server.http.get(f"/api/jobs/{job_id}/metrics").json()
    assert [row["step"] for row in metrics["train"]] == list(range(1, 13))
    rates = [row["learning_rate"] for row in metrics["train"]]
    assert rates[0] == pytest.approx(5e-3) and rates[-1] == pytest.approx(5e-4)  # linear to 10%
    assert {row["rank"] for row in metrics["memory"]} == {0, 1}
    config = server.http.get(f"/api/jobs/{job_id}/config").json()
    assert config["source"] == "run folder"
    assert config["config"]["zero_optimization"]["stage"] == 2

    merged = _download(server, job_id, "merged", tmp_path)
    adapter = _download(server, job_id, "adapter", tmp_path)
    assert (merged / "config.json").is_file() and list(merged.glob("*.safetensors"))
    assert (adapter / "adapter_config.json").is_file()
    _assert_merged_equals_base_plus_adapter(merged, adapter, server.home / "builtin" / "tiny-llama")


def _download(server, job_id: int, kind: str, tmp_path):
    response = server.http.get(f"/api/jobs/{job_id}/artifacts/{kind}")
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    zipfile.ZipFile(io.BytesIO(response.content)).extractall(tmp_path)
    return tmp_path / kind


def _assert_merged_equals_base_plus_adapter(merged, adapter, base_folder):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(merged)
    inputs = tokenizer(["What is 12 + 7?"], return_tensors="pt")
    merged_model = AutoModelForCausalLM.from_pretrained(merged).eval()
    adapter_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_folder),
                                              adapter).eval()
    with torch.no_grad():
        merged_logits = merged_model(**inputs).logits
        adapter_logits = adapter_model(**inputs).logits
    assert torch.allclose(merged_logits, adapter_logits, atol=1e-4)


def test_a_local_model_folder_and_a_chat_jsonl_of_the_users_own(server, tmp_path):
    import json

    from trainer.model.builtin_model import ensure_builtin_model

    model_folder = ensure_builtin_model(tmp_path / "models")  # stands in for any HF folder
    chats = tmp_path / "chats.jsonl"
    with chats.open("w") as file:
        for a in range(40):
            messages = [{"role": "system", "content": "You add numbers."},
                        {"role": "user", "content": f"{a} plus 2?"},
                        {"role": "assistant", "content": str(a + 2)}]
            file.write(json.dumps({"messages": messages}) + "\n")
    job_id = server.submit({**LORA_JOB, "name": "own-model-and-data", "backend": "fsdp",
                            "model": str(model_folder), "dataset": str(chats), "max_steps": 4,
                            "fsdp": {"sharding_strategy": "shard_grad_op"}})
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
    assert job["status"] == "succeeded", job["error"]
    assert len(server.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]) == 4


def test_missing_dataset_fails_at_once_naming_the_path(server, tmp_path):
    missing = tmp_path / "nonexistent" / "train.jsonl"  # inside the allowed roots
    job_id = server.submit({**LORA_JOB, "dataset": str(missing)})
    job = server.wait_for(job_id, {"failed", "succeeded"}, timeout_seconds=60)
    assert job["status"] == "failed"
    assert str(missing) in job["error"] and "no such file" in job["error"]
    assert server.http.get("/healthz").status_code == 200


def test_wrong_columns_are_refused_at_submit_naming_the_file_and_the_likely_columns(server,
                                                                                  tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "2+2?", "answer": "4"}\n')
    before = {job["id"] for job in server.http.get("/api/jobs").json()}
    response = server.http.post("/api/jobs", json={**LORA_JOB, "dataset": str(data)})
    assert response.status_code == 422, response.text
    message = response.text
    assert "dataset" in message and str(data) in message, message
    assert "likely columns: {prompt: question, response: answer}" in message, message
    # No job was made, to fail later on a worker.
    assert {job["id"] for job in server.http.get("/api/jobs").json()} == before


def test_cancel_leaves_no_process_of_the_job(server):
    job_id = server.submit({**LORA_JOB, "name": "e2e-cancel", "max_steps": 100000,
                            "backend": "fsdp"})
    _wait_for_first_step(server, job_id)
    processes = _job_processes(server, job_id)
    assert len(processes) == 3  # torchrun and its two ranks (forked by the warm launcher)
    assert server.http.post(f"/api/jobs/{job_id}/cancel").status_code == 202
    job = server.wait_for(job_id, {"cancelled", "failed", "succeeded"}, timeout_seconds=60)
    assert job["status"] == "cancelled"
    assert _job_processes(server, job_id) == []
    assert server.http.post(f"/api/jobs/{job_id}/cancel").json()["status"] == "cancelled"


def _wait_for_first_step(server, job_id: int, timeout_seconds: float = 180) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if server.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]:
            return
        assert server.job(job_id)["status"] in ("queued", "running"), server.job(job_id)
        time.sleep(0.5)
    raise AssertionError("no training step reached the database")


def _job_processes(server, job_id: int) -> list[int]:
    """Every live process of the job: those whose command line names its run folder (a cold
    torchrun and its ranks), and those in its launcher's process group (a torchrun forked by
    the warm launcher and its ranks: their command lines name no folder)."""
    import psutil

    from worker.process_group import live_group_members

    run_dir = str(server.home.resolve() / "runs" / f"job-{job_id}")
    found = set()
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        if process.info["status"] != psutil.STATUS_ZOMBIE and run_dir in (process.info["cmdline"] or []):
            found.add(process.info["pid"])
    launcher_pid = server.job(job_id).get("launcher_pid")
    if launcher_pid:
        found.update(live_group_members(launcher_pid))
    return sorted(found)


def test_cancel_after_a_checkpoint_then_resume_finishes_the_same_job(server):
    """Through the real stack: the job is cancelled once its first checkpoint is complete,
    Resume queues it again, the worker relaunches torchrun with --resume, and the job ends
    with one train row per step and downloadable weights."""
    steps = 300
    job_id = server.submit({**LORA_JOB, "name": "e2e-resume", "backend": "fsdp",
                            "max_steps": steps, "checkpoint_every_steps": 5,
                            "keep_checkpoints": 2})
    deadline = time.monotonic() + 180
    while not server.http.get(f"/api/jobs/{job_id}/checkpoints").json():
        assert time.monotonic() < deadline, server.log_tail(job_id)
        assert server.job(job_id)["status"] in ("queued", "running"), server.job(job_id)
        time.sleep(0.2)
    assert server.http.post(f"/api/jobs/{job_id}/cancel").status_code == 202
    cancelled = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
    assert cancelled["status"] == "cancelled", cancelled
    latest = server.http.get(f"/api/jobs/{job_id}/checkpoints").json()[0]["step"]
    assert latest < steps

    response = server.http.post(f"/api/jobs/{job_id}/resume")
    assert response.status_code == 202, response.text
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
    assert job["status"] == "succeeded", job["error"]
    assert job["attempts"] == 2
    events = [event["message"] for event in server.http.get(f"/api/jobs/{job_id}/events").json()]
    assert f"resume requested from the checkpoint at step {latest}" in events
    assert any(message.startswith(f"resumed from step {latest}") for message in events), events
    train = server.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]
    assert [row["step"] for row in train] == list(range(1, steps + 1))
    assert server.http.get(f"/api/jobs/{job_id}/artifacts/merged").status_code == 200
    launch = server.http.get(f"/api/jobs/{job_id}/config").json()
    assert launch["argv"][-1] == "--resume"


def test_a_trainer_folder_where_tunedeck_started_was_never_run(server, decoy_project):
    """Issue 30: every job of this module ran from a folder holding a decoy `trainer/` (cold
    and warm launches, Check data's helper); each ran TuneDeck's installed trainer."""
    job_id = server.submit({**LORA_JOB, "name": "e2e-decoy", "max_steps": 2, "backend": "fsdp"})
    assert server.wait_for(job_id, {"succeeded", "failed", "cancelled"})["status"] == "succeeded"
    launch = json.loads((server.home / "runs" / f"job-{job_id}" / "launch.json").read_text())
    assert launch["cwd"] == str(decoy_project) and launch["env"]["PYTHONSAFEPATH"] == "1"
    assert not (decoy_project / "decoy-trainer-ran").exists()


def test_a_dpo_job_on_the_users_own_chat_pairs_learns_the_chosen_style(server, tmp_path):
    """Objective DPO through the whole path, on a file laid out as the Hub's binarized
    feedback sets are (chosen/rejected chats sharing their prompt) under columns of the
    user's own names: the preference figures arrive with every step, the accuracy climbs from
    a coin toss, the merged weights download, and Try it answers in the chosen style."""
    import re

    from trainer.data.builtin_dataset import arithmetic_preference_records

    pairs = tmp_path / "feedback.jsonl"
    with pairs.open("w") as file:
        for record in arithmetic_preference_records(400):
            prompt = [{"role": "user", "content": record["prompt"]}]
            file.write(json.dumps({
                "good": [*prompt, {"role": "assistant", "content": record["chosen"]}],
                "bad": [*prompt, {"role": "assistant", "content": record["rejected"]}]}) + "\n")
    job_id = server.submit({
        "name": "e2e-dpo", "objective": "dpo", "dataset": str(pairs), "method": "lora",
        "backend": "zero2", "num_gpus": 2, "max_steps": 60, "learning_rate": 3e-3,
        "micro_batch_size": 8, "seq_len": 48, "lr_schedule": "constant",
        "columns": {"chosen": "good", "rejected": "bad"},
        # The chosen answers' cross-entropy too (RPO): a random model learns to write them.
        "dpo": {"beta": 0.1, "sft_weight": 1.0}})
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
    assert job["status"] == "succeeded", job["error"]
    train = server.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]
    assert [row["step"] for row in train] == list(range(1, 61))
    assert train[0]["reward_accuracy"] == 0.5 and abs(train[0]["reward_margin"]) < 1e-4
    assert min(row["reward_accuracy"] for row in train[-10:]) > 0.9
    assert train[-1]["reward_margin"] > 1.0 and train[-1]["logps_chosen"] > train[0]["logps_chosen"]
    merged = _download(server, job_id, "merged", tmp_path)
    assert (merged / "config.json").is_file() and list(merged.glob("*.safetensors"))

    def try_it(variant: str) -> str:
        response = server.http.post(f"/api/jobs/{job_id}/generate", json={
            "messages": [{"role": "user", "content": "What is 12 + 7?"}],
            "max_new_tokens": 12, "temperature": 0.0, "variant": variant})
        assert response.status_code == 200 and response.json()["status"] == "done", response.text
        return response.json()["text"]

    tuned, base = try_it("merged"), try_it("base")
    assert re.search(r"[+-].*= ?\d+\.$", tuned.strip()), tuned  # "a + b = c."
    assert not re.search(r"= \d+\.", base), base
