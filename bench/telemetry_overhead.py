"""What per-step telemetry costs the training loop (target: at most 1% of step time).

The same spec under plain `torchrun`, once with `--metrics on` (every rank appends its
step, memory and notice lines to metrics/rank-<K>.jsonl, flushed a line) and once with
`--metrics off` (the trainer's NullTelemetry), in alternating pairs so that a slow minute
of the machine hits both sides. Each run prints its `training summary`; the figure is

    median over pairs of (median step seconds, metrics on / metrics off)   (target <= 1.01)

The reference is the metrics-off run of the same pair.

Usage: .venv/bin/python bench/telemetry_overhead.py [--steps 200] [--pairs 4] [--ranks 2]
                                                     [--backend zero2|fsdp]
Takes about pairs x 2 x (start-up + steps x step time): some minutes on a CPU machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_runs import run_plain_torchrun  # noqa: E402

from tunedeck.job_spec import JobSpec  # noqa: E402

TARGET_RATIO = 1.01


def bench_spec(steps: int, ranks: int, backend: str) -> JobSpec:
    return JobSpec(name="telemetry-bench", model="builtin:tiny-llama", dataset="builtin:arithmetic",
                   method="lora", backend=backend, num_gpus=ranks, max_steps=steps,
                   learning_rate=1e-3, micro_batch_size=8, seq_len=64, precision="bf16")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--backend", choices=("zero2", "fsdp"), default="fsdp")
    arguments = parser.parse_args()
    spec = bench_spec(arguments.steps, arguments.ranks, arguments.backend)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
        home = Path(folder)
        run_plain_torchrun(home, spec.model_copy(update={"max_steps": 3}), home / "warm")
        for index in range(arguments.pairs):
            order = (True, False) if index % 2 == 0 else (False, True)
            seconds = {}
            for metrics in order:
                run_dir = home / f"pair-{index}-metrics-{'on' if metrics else 'off'}"
                run = run_plain_torchrun(home, spec, run_dir, metrics=metrics)
                seconds[metrics] = run.summary.median_step_seconds
            ratios.append(seconds[True] / seconds[False])
            print(f"pair {index + 1}: median step {seconds[True] * 1000:.2f} ms with metrics on, "
                  f"{seconds[False] * 1000:.2f} ms off, ratio {ratios[-1]:.4f}", flush=True)
    print(f"{arguments.backend}, {arguments.ranks} rank(s), {arguments.steps} steps, "
          f"{arguments.pairs} pairs:")
    print(f"  median step seconds, metrics on / metrics off: {statistics.median(ratios):.4f} "
          f"(pairs {', '.join(f'{ratio:.4f}' for ratio in ratios)})  target <= {TARGET_RATIO}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
