""""Compare backends" through the real `tunedeck up`: a tiny LoRA job cloned into a ZeRO-2
and an FSDP job, both trained by real torchrun with 2 CPU ranks, then compared."""
from __future__ import annotations

import pytest

from harness.servers import running_tunedeck

pytestmark = [pytest.mark.torchrun]

SOURCE_JOB = {"name": "compare-src", "model": "builtin:tiny-llama",
              "dataset": "builtin:arithmetic", "method": "lora", "backend": "zero2",
              "num_gpus": 2, "max_steps": 6, "learning_rate": 5e-3, "micro_batch_size": 8,
              "seq_len": 64, "precision": "bf16", "lora": {"r": 8, "alpha": 16, "dropout": 0.0}}


def test_compare_backends_runs_both_variants_and_compares_them(tmp_path):
    with running_tunedeck(tmp_path / "home") as server:
        source = server.submit(SOURCE_JOB)
        # Only the copies need to run: a queued job is cancelled at once.
        assert server.http.post(f"/api/jobs/{source}/cancel").json()["status"] == "cancelled"
        response = server.http.post(f"/api/jobs/{source}/compare-backends")
        assert response.status_code == 201, response.text
        body = response.json()
        ids = [job["id"] for job in body["jobs"]]
        for job_id in ids:
            job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
            assert job["status"] == "succeeded", (job["error"], server.log_tail(job_id))
        compared = server.http.get(body["compare_url"]).json()

    assert [job["backend"] for job in compared["jobs"]] == ["zero2", "fsdp"]
    assert {entry["field"] for entry in compared["diff"]} == {"backend", "name"}
    for job_id in ids:
        train = [row["step"] for row in compared["series"]["loss"]
                 if row["job_id"] == job_id and row["kind"] == "train"]
        assert train == list(range(1, 7))
        assert any(row["job_id"] == job_id for row in compared["series"]["tokens_per_second"])
        assert {row["rank"] for row in compared["series"]["memory"]
                if row["job_id"] == job_id} == {0, 1}
