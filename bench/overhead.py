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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.servers import running_tunedeck  # noqa: E402
from tunedeck.backend_config import backend_config, build_torchrun_argv  # noqa: E402
from tunedeck.job_spec import JobSpec  # noqa: E402
from tunedeck.run_folder import RunFolder, write_run_folder  # noqa: E402

SUMMARY = re.compile(r"training summary: tokens=(\d+) seconds=([\d.]+) tokens_per_second=([\d.]+)")


def bench_spec(steps: int, backend: str) -> JobSpec:
    return JobSpec(name="overhead-bench", model="builtin:tiny-llama", dataset="builtin:arithmetic",
                   method="lora", backend=backend, num_gpus=2, max_steps=steps,
                   learning_rate=1e-3, micro_batch_size=8, seq_len=64, precision="bf16")


def tokens_per_second(log_text: str) -> float:
    match = SUMMARY.search(log_text)
    if match is None:
        raise RuntimeError("no training summary in the log:\n" + log_text[-2000:])
    return float(match.group(3))


def run_through_tunedeck(server, spec: JobSpec) -> float:
    job_id = server.submit(spec.model_dump(mode="json"))
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"}, timeout_seconds=1800)
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job_id} {job['status']}: {job['error']}")
    log = server.home / "runs" / f"job-{job_id}" / "logs" / "torchrun.log"
    return tokens_per_second(log.read_text())


def run_plain_torchrun(home: Path, spec: JobSpec, index: int) -> float:
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
    return tokens_per_second(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--backend", choices=("zero2", "fsdp"), default="zero2")
    arguments = parser.parse_args()
    spec = bench_spec(arguments.steps, arguments.backend)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
        home = Path(folder)
        with running_tunedeck(home / "server") as server:
            run_plain_torchrun(home / "server", spec.model_copy(update={"max_steps": 3}), -1)  # warm caches
            for index in range(arguments.pairs):
                plain = run_plain_torchrun(home / "server", spec, index)
                through = run_through_tunedeck(server, spec)
                ratios.append(through / plain)
                print(f"pair {index + 1}: plain torchrun {plain:,.0f} tokens/s, "
                      f"through TuneDeck {through:,.0f} tokens/s, ratio {through / plain:.3f}",
                      flush=True)
    print(f"overhead ratio (median of {len(ratios)} pairs, {arguments.backend}, "
          f"{arguments.steps} steps): {statistics.median(ratios):.3f}  (target >= 0.98)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
