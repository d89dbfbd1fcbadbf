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
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_runs import Summary, read_summary, run_plain_torchrun  # noqa: E402

from harness.servers import running_tunedeck  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402


def bench_spec(steps: int, backend: str) -> JobSpec:
    return JobSpec(name="overhead-bench", model="builtin:tiny-llama", dataset="builtin:arithmetic",
                   method="lora", backend=backend, num_gpus=2, max_steps=steps,
                   learning_rate=1e-3, micro_batch_size=8, seq_len=64, precision="bf16")


def run_through_tunedeck(server, spec: JobSpec) -> Summary:
    job_id = server.submit(spec.model_dump(mode="json"))
    # Poll slowly: the benchmark's own requests should not weigh on the job it measures.
    job = server.wait_for(job_id, {"succeeded", "failed", "cancelled"}, timeout_seconds=1800,
                          poll_seconds=3)
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job_id} {job['status']}: {job['error']}")
    log = server.home / "runs" / f"job-{job_id}" / "logs" / "torchrun.log"
    return read_summary(log.read_text())


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
            warm = spec.model_copy(update={"max_steps": 3})
            run_plain_torchrun(home, warm, home / "plain" / "warm")  # warm caches
            for index in range(arguments.pairs):
                # Alternate who goes first, so a slow minute of the machine hits both sides.
                runs = [lambda: run_plain_torchrun(home, spec, home / "plain" / f"run-{index}").summary,
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
