"""The data preflight through a real `tunedeck up`: HTTP, the broker, the Celery worker's
thread, the database row, and `tunedeck preflight` on the command line, all while a job
holds the worker's only job slot (its trainer, tests/e2e/sleepy_trainer, waits to be
cancelled): the worker's spare thread serves the preflight anyway."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.services import REPO
from harness.servers import running_tunedeck, stand_in_trainer_environment

pytestmark = [pytest.mark.torchrun]

JOB = {"name": "holds-the-slot", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
       "backend": "fsdp", "num_gpus": 1, "max_steps": 5}


def write_pairs(path: Path) -> Path:
    """40 records: the last 5 repeat the first 5, and 11 answers (every fourth of the 35,
    and 2 of the repeats) run past seq_len 64."""
    records = [{"prompt": f"What is {n} + 1?",
                "response": "one two three " * 30 if n % 4 == 0 else str(n + 1)}
               for n in range(35)]
    path.write_text("".join(json.dumps(record) + "\n" for record in [*records, *records[:5]]))
    return path


def wait_for_report(server, answer: dict, timeout_seconds: float = 180) -> dict:
    deadline = time.monotonic() + timeout_seconds
    while answer["status"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.5)
        answer = server.http.get(f"/api/datasets/preflight/{answer['id']}").json()
    return answer


def test_a_preflight_is_served_while_a_job_holds_the_only_slot_and_the_cli_prints_it(tmp_path):
    data = write_pairs(tmp_path / "pairs.jsonl")
    env = {**stand_in_trainer_environment("tests.e2e.sleepy_trainer"),
           "TUNEDECK_WARM_START": "false"}
    with running_tunedeck(tmp_path / "home", extra_env=env) as server:
        job_id = server.submit(JOB)
        server.wait_for(job_id, {"running"}, timeout_seconds=120)
        workers = server.http.get("/api/workers").json()["workers"]
        assert [(worker["concurrency"], len(worker["jobs"])) for worker in workers] == [(1, 1)]

        response = server.http.post("/api/datasets/preflight",
                                    json={"dataset": str(data), "seq_len": 64})
        assert response.status_code in (200, 202), response.text
        # The worker's first preflight also imports transformers and builds the built-in
        # tokenizer, which may take longer than the POST waits.
        answer = wait_for_report(server, response.json())
        assert answer["status"] == "done", answer
        report = answer["report"]
        assert report["records"] == 40
        assert report["lose_answer_tokens"] == {"count": 11, "share": 0.275}
        assert report["duplicates"]["records"] == 5
        assert server.job(job_id)["status"] == "running"  # the slot was held throughout

        spec_file = tmp_path / "spec.yaml"
        spec_file.write_text(json.dumps({**JOB, "dataset": str(data), "seq_len": 64}))
        started = time.monotonic()
        printed = subprocess.run(
            [sys.executable, "-m", "cli", "preflight", str(spec_file), "--server",
             server.base_url, "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert printed.returncode == 0, printed.stderr
        from_cli = json.loads(printed.stdout)
        assert from_cli["status"] == "done" and from_cli["id"] == answer["id"] + 1
        assert {key: value for key, value in from_cli["report"].items() if key != "seconds"} == \
            {key: value for key, value in report.items() if key != "seconds"}
        assert time.monotonic() - started < 60  # a warm worker answers within the POST's wait
        text = subprocess.run(
            [sys.executable, "-m", "cli", "preflight", str(spec_file), "--server",
             server.base_url], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert text.returncode == 0, text.stderr
        assert "40 records; all tokenized" in text.stdout
        assert "11 (27.5%) lose answer tokens to truncation" in text.stdout
        assert "seq_len 64" in text.stdout and "[[" in text.stdout and "<<cut: " in text.stdout
        # The same server answers what the spec's LoRA adapts, on the command line too.
        targets = subprocess.run(
            [sys.executable, "-m", "cli", "lora-targets", str(spec_file), "--server",
             server.base_url], cwd=REPO, capture_output=True, text=True, timeout=180)
        assert targets.returncode == 0, targets.stderr
        assert targets.stdout.startswith("LlamaForCausalLM (llama): 32,768 trainable parameters")
        assert "model.layers.*.self_attn.q_proj" in targets.stdout and "`" not in targets.stdout
        assert server.http.post(f"/api/jobs/{job_id}/cancel").status_code == 202
        server.wait_for(job_id, {"cancelled"}, timeout_seconds=60)
