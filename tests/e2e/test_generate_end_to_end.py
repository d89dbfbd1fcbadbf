""""Try it" through a real `tunedeck up`: a LoRA job on builtin:tiny-llama and
builtin:arithmetic, then prompts over HTTP and `tunedeck generate` to its merged, adapter and
base models, answered by the job's worker (broker, spare thread, warm generation process),
also while another job holds the worker's only job slot."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from harness.services import REPO
from harness.servers import running_tunedeck

pytestmark = [pytest.mark.torchrun]

JOB = {"name": "try-it", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
       "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 24,
       "learning_rate": 1e-2, "micro_batch_size": 8, "seq_len": 64, "precision": "bf16",
       "lora": {"r": 8, "alpha": 16, "dropout": 0.0}}
PROMPT = "What is 12 + 7?"


def ask(server, job_id: int, variant: str = "merged", **sampling) -> dict:
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_new_tokens": 16,
            "temperature": 0.0, "variant": variant, **sampling}
    response = server.http.post(f"/api/jobs/{job_id}/generate", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "done", answer
    return answer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(the server, a succeeded LoRA job's id)."""
    with running_tunedeck(tmp_path_factory.mktemp("generate")) as server:
        job_id = server.submit(JOB)
        job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
        assert job["status"] == "succeeded", job["error"]
        yield server, job_id


def test_a_prompt_is_answered_while_a_job_holds_the_workers_only_slot(trained):
    server, job_id = trained
    long_job = server.submit({**JOB, "name": "holds-the-slot", "max_steps": 100_000})
    try:
        server.wait_for(long_job, {"running"}, timeout_seconds=120)
        [worker] = server.http.get("/api/workers").json()["workers"]
        assert (worker["concurrency"], len(worker["jobs"])) == (1, 1)
        answer = ask(server, job_id)  # on the worker's spare thread, on its CPU
        assert answer["tokens"] >= 1 and answer["device"] == "cpu"
        assert answer["warm"] is False and answer["load_seconds"] > 0  # the first prompt
        assert server.job(long_job)["status"] == "running"
    finally:
        assert server.http.post(f"/api/jobs/{long_job}/cancel").status_code == 202
        server.wait_for(long_job, {"cancelled", "failed", "succeeded"}, timeout_seconds=120)


def test_a_trained_job_answers_repeatably_and_differs_from_its_base(trained):
    server, job_id = trained
    first = ask(server, job_id)
    again = ask(server, job_id)
    assert first["text"] == again["text"] and first["tokens"] == again["tokens"] >= 1
    assert again["warm"] is True
    assert first["device"] == "cpu" and first["variant"] == "merged"
    assert again["seconds"] > 0 and again["load_seconds"] == 0

    base = ask(server, job_id, "base")
    adapter = ask(server, job_id, "adapter")
    assert base["text"] != first["text"]  # what 24 steps of arithmetic changed
    assert adapter["text"] == first["text"]  # merged = base + adapter, greedily
    sampled = ask(server, job_id, "base", temperature=1.5, top_p=1.0, seed=3)
    assert sampled["tokens"] >= 1
    assert ask(server, job_id, "base", temperature=1.5, top_p=1.0, seed=3)["text"] == \
        sampled["text"]

    printed = subprocess.run(
        [sys.executable, "-m", "cli", "generate", str(job_id), PROMPT,
         "--temperature", "0", "--max-new-tokens", "16", "--server", server.base_url,
         "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["text"] == first["text"]
    plain = subprocess.run(
        [sys.executable, "-m", "cli", "generate", str(job_id), PROMPT,
         "--temperature", "0", "--max-new-tokens", "16", "--variant", "base",
         "--server", server.base_url], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == base["text"].strip()
    # The generation's own time, in ms for a tiny model's few tokens (not "0.00 s").
    assert re.search(r"^\(\d+ tokens in [\d.]+ m?s \([\d,]+ tokens/s\), base on cpu\)$",
                     plain.stderr.strip()), plain.stderr

    too_long = server.http.post(f"/api/jobs/{job_id}/generate", json={
        "messages": [{"role": "user", "content": PROMPT}], "max_new_tokens": 5000})
    assert too_long.status_code == 422 and "max_new_tokens" in too_long.text
    # The merged weights deleted by hand: refused, naming them; the others still answer.
    merged = server.home / "runs" / f"job-{job_id}" / "merged"
    merged.rename(merged.with_name("merged-moved"))
    gone = server.http.post(f"/api/jobs/{job_id}/generate", json={
        "messages": [{"role": "user", "content": PROMPT}]})
    assert gone.status_code == 409 and "merged" in gone.json()["detail"], gone.text
    refused = subprocess.run(
        [sys.executable, "-m", "cli", "generate", str(job_id), PROMPT,
         "--server", server.base_url], cwd=REPO, capture_output=True, text=True, timeout=60)
    # The server's own words (a 409), as every client command exits on a refusal.
    assert refused.returncode != 0 and "were deleted or never written" in refused.stderr
    assert ask(server, job_id, "adapter")["text"] == first["text"]
