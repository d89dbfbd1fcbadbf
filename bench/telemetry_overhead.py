"""What per-step telemetry costs the training loop (target: at most 1% of step time).

The same spec under plain `torchrun`, once with `--metrics on` (every rank appends its
step, memory and notice lines to metrics/rank-<K>.jsonl, flushed a line) and once with
`--metrics off` (the trainer's NullTelemetry), in alternating pairs so that a slow minute
of the machine hits both sides. Two figures:

- in the run (the figure judged): the trainer times its own telemetry calls each step
  (`telemetry_seconds` in its `training summary`), so each metrics-on run gives

      loop seconds / (loop seconds - telemetry seconds)       (target <= 1.01)

  the same run with its telemetry taken out; the median over the pairs' on-runs is printed.
- between runs: median over pairs of (median step seconds, metrics on / metrics off), the
  metrics-off run of the same pair as the reference. It also holds costs outside the calls
  (a busier page cache, the file), but on a shared CPU machine two runs' step times differ
  by several % whatever they run, so it only bounds the cost coarsely; both are printed.

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

from tunedeck.spec.job_spec import JobSpec  # noqa: E402

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
    ratios, in_run = [], []
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
                if metrics:
                    summary = run.summary
                    in_run.append(summary.seconds / (summary.seconds - summary.telemetry_seconds))
            ratios.append(seconds[True] / seconds[False])
            print(f"pair {index + 1}: telemetry {in_run[-1]:.5f} of the loop in the run; "
                  f"median step {seconds[True] * 1000:.2f} ms with metrics on, "
                  f"{seconds[False] * 1000:.2f} ms off, ratio {ratios[-1]:.4f}", flush=True)
    print(f"{arguments.backend}, {arguments.ranks} rank(s), {arguments.steps} steps, "
          f"{arguments.pairs} pairs:")
    print(f"  in the run, loop / (loop - telemetry): {statistics.median(in_run):.5f} "
          f"(runs {', '.join(f'{ratio:.5f}' for ratio in in_run)})  target <= {TARGET_RATIO}")
    print(f"  between runs, median step seconds on / off: {statistics.median(ratios):.4f} "
          f"(pairs {', '.join(f'{ratio:.4f}' for ratio in ratios)}; the machine's run-to-run "
          f"spread, {max(ratios) - min(ratios):.3f}, is the noise of this one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
