""""Try it" latency: from `POST /api/jobs/{id}/generate` to its answer, cold and warm, on
builtin:tiny-llama (target: a warm answer at once, far below a cold one).

A real `tunedeck up` (HTTP, broker, the Celery worker's spare thread, the worker's
generation process) with TUNEDECK_GENERATION_WARM_SECONDS set to `--warm-seconds`
(default 4). One short LoRA job on builtin:arithmetic trains and exports merged weights;
then, for each of `--rounds` (default 3): a cold request (no generation process: it starts,
imports torch and transformers, loads the merged model), `--warm` (default 5) warm ones
right after, then a wait past the warm time, so the process stops and the next round is
cold again. Every request asks for `--max-new-tokens` (default 32) at temperature 0.

Printed: each request's wall time as the client saw it, the worker's own split (model
load, generation), the medians, and the figure: warm / cold (lower is better). The
in-run reference is the generation alone (the model's `generate` call), which the warm
path cannot beat: the gap between the two is the HTTP, broker and database round trip.

Usage: .venv/bin/python bench/generate_latency.py [--rounds 3] [--warm 5] [--warm-seconds 4]
Takes about a minute for the job plus ~10 s a round on a small CPU machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.servers import running_tunedeck  # noqa: E402

JOB = {"name": "generate-latency", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
       "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 8,
       "learning_rate": 1e-2, "micro_batch_size": 8, "seq_len": 64, "precision": "bf16"}
PROMPT = "What is 12 + 7?"


def timed_request(server, job_id: int, max_new_tokens: int) -> dict:
    started = time.perf_counter()
    response = server.http.post(f"/api/jobs/{job_id}/generate", json={
        "messages": [{"role": "user", "content": PROMPT}], "max_new_tokens": max_new_tokens,
        "temperature": 0})
    wall = time.perf_counter() - started
    answer = response.json()
    if response.status_code != 200 or answer.get("status") != "done":
        raise SystemExit(f"generate answered {response.status_code}: {answer}")
    return {**answer, "wall": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--warm-seconds", type=float, default=4.0)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    arguments = parser.parse_args()
    environment = {"TUNEDECK_GENERATION_WARM_SECONDS": str(arguments.warm_seconds)}
    with tempfile.TemporaryDirectory(prefix="generate-latency-") as home, \
            running_tunedeck(Path(home), extra_env=environment) as server:
        job_id = server.submit(JOB)
        job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"})
        if job["status"] != "succeeded":
            raise SystemExit(f"the job {job['status']}: {job['error']}")
        cold, warm = [], []
        for round_number in range(1, arguments.rounds + 1):
            first = timed_request(server, job_id, arguments.max_new_tokens)
            assert not first["warm"], "the generation process outlived its warm time"
            cold.append(first)
            warm.extend(timed_request(server, job_id, arguments.max_new_tokens)
                        for _ in range(arguments.warm))
            _print_round(round_number, first, warm[-arguments.warm:])
            time.sleep(arguments.warm_seconds + 2)  # past the warm time: the process stops
    cold_wall = statistics.median(answer["wall"] for answer in cold)
    warm_wall = statistics.median(answer["wall"] for answer in warm)
    generate_only = statistics.median(answer["seconds"] for answer in warm)
    print(f"\ncold: median {cold_wall:.3f} s over {len(cold)} (model load median "
          f"{statistics.median(answer['load_seconds'] for answer in cold):.3f} s)")
    print(f"warm: median {warm_wall:.3f} s over {len(warm)}; the generation alone "
          f"{generate_only:.3f} s ({warm[0]['tokens']} tokens)")
    print(f"figure: warm / cold = {warm_wall / cold_wall:.3f}")
    return 0


def _print_round(number: int, cold: dict, warm: list[dict]) -> None:
    print(f"round {number}: cold {cold['wall']:.3f} s (load {cold['load_seconds']:.3f} s, "
          f"generate {cold['seconds']:.3f} s); warm "
          + ", ".join(f"{answer['wall']:.3f}" for answer in warm) + " s")


if __name__ == "__main__":
    sys.exit(main())
