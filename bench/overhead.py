"""What launching through TuneDeck costs a job's throughput.

For the same spec, alternately: (a) a job submitted to a real `tunedeck up` (HTTP, Celery
worker, run folder, torchrun, per-step telemetry tailed into SQLite), and (b) the same
trainer under plain `torchrun` with `--metrics off`. Each run prints a `training summary`
(tokens and seconds of the training loop after its first step); the figure is

    overhead ratio = tokens/s through TuneDeck / tokens/s of plain torchrun   (target >= 0.98)

Usage: .venv/bin/python bench/overhead.py [--steps 80] [--pairs 3] [--backend zero2|fsdp]
On a CPU-only machine, ranks are CPU processes (gloo); absolute figures mean little there,
the ratio is the point.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.servers import running_tunedeck  # noqa: E402
from tunedeck.backend_config import backend_config, build_torchrun_argv  # noqa: E402
from tunedeck.job_spec import JobSpec  # noqa: E402
from tunedeck.run_folder import RunFolder, write_run_folder  # noqa: E402

SUMMARY = re.compile(r"training summary: tokens=(\d+) seconds=([\d.]+) "
                     r"tokens_per_second=([\d.]+) median_step_seconds=([\d.]+)")


def bench_spec(steps: int, backend: str) -> JobSpec:
    return JobSpec(name="overhead-bench", model="builtin:tiny-llama", dataset="builtin:arithmetic",
                   method="lora", backend=backend, num_gpus=2, max_steps=steps,
                   learning_rate=1e-3, micro_batch_size=8, seq_len=64, precision="bf16")


@dataclass(frozen=True)
class Summary:
    tokens_per_second: float
    median_step_seconds: float


def read_summary(log_text: str) -> Summary:
    match = SUMMARY.search(log_text)
    if match is None:
        raise RuntimeError("no training summary in the log:\n" + log_text[-2000:])
    return Summary(float(match.group(3)), float(match.group(4)))


def run_through_tunedeck(server, spec: JobSpec) -> Summary:
    job_id = server.submit(spec.model_dump(mode="json"))
    # Poll slowly: the benchmark's own requests should not weigh on the job it measures.
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"}, timeout_seconds=1800,
                          poll_seconds=3)
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job_id} {job['status']}: {job['error']}")
    log = server.home / "runs" / f"job-{job_id}" / "logs" / "torchrun.log"
    return read_summary(log.read_text())


def run_plain_torchrun(home: Path, spec: JobSpec, index: int) -> Summary:
    run = RunFolder(home / "plain" / f"run-{index}")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv = [*build_torchrun_argv(spec, str(run.path), torchrun=torchrun), "--metrics", "off"]
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec), launch={"argv": argv, "env": {}})
    env = {**os.environ, "TUNEDECK_HOME": str(home), "OMP_NUM_THREADS": os.environ.get(
        "OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // spec.num_gpus)))}
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-2000:] + result.stderr[-2000:])
    return read_summary(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--backend", choices=("zero2", "fsdp"), default="zero2")
    arguments = parser.parse_args()
    spec = bench_spec(arguments.steps, arguments.backend)
    throughput_ratios, step_ratios = [], []
    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
        home = Path(folder) / "server"
        with running_tunedeck(home) as server:
            run_plain_torchrun(home, spec.model_copy(update={"max_steps": 3}), -1)  # warm caches
            for index in range(arguments.pairs):
                # Alternate who goes first, so a slow minute of the machine hits both sides.
                runs = [lambda: run_plain_torchrun(home, spec, index),
                        lambda: run_through_tunedeck(server, spec)]
                first, second = (runs if index % 2 == 0 else runs[::-1])
                results = [first(), second()]
                plain, through = results if index % 2 == 0 else results[::-1]
                throughput_ratios.append(through.tokens_per_second / plain.tokens_per_second)
                step_ratios.append(plain.median_step_seconds / through.median_step_seconds)
                print(f"pair {index + 1}: plain torchrun {plain.tokens_per_second:,.0f} tokens/s "
                      f"(median step {plain.median_step_seconds * 1000:.1f} ms), through TuneDeck "
                      f"{through.tokens_per_second:,.0f} tokens/s (median step "
                      f"{through.median_step_seconds * 1000:.1f} ms)", flush=True)
    print(f"{arguments.backend}, {arguments.steps} steps, {arguments.pairs} pairs:")
    print(f"  overhead ratio, tokens/s through TuneDeck / plain torchrun: "
          f"{statistics.median(throughput_ratios):.3f} (median; pairs "
          f"{', '.join(f'{r:.3f}' for r in throughput_ratios)})  target >= 0.98")
    print(f"  same, from median step time (robust to a noisy machine): "
          f"{statistics.median(step_ratios):.3f} (pairs {', '.join(f'{r:.3f}' for r in step_ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
