"""What one tiny trainer launch costs the machine, cold against forked from a pre-imported
zygote (harness/trainer_zygote.py, which the test suite's trainer launches use): the CPU the
suite's trainer tests spent was mostly imports, so this figure decides their share of CI.

For the same 2-rank LoRA spec (10 steps of the built-in model), alternately: (a) a cold
`torchrun ... -m trainer`, exactly as a worker would launch it, (b) the same argv forked from
one zygote (started, and warmed by one launch, before the timing). Each launch's figure is
the whole machine's CPU seconds while it ran (/proc/stat: ranks, launcher and zygote alike,
so run it on an otherwise idle machine) and its wall seconds; the figure is

    CPU ratio = median CPU-s of a forked launch / median CPU-s of a cold launch

Usage: .venv/bin/python bench/launch_cost.py [--pairs 3] [--backend fsdp|zero2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.trainer_zygote import TrainerZygote  # noqa: E402
from tunedeck.launch_config import backend_config, build_torchrun_argv  # noqa: E402
from tunedeck.run_folder import RunFolder, write_run_folder  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TIMEOUT_SECONDS = 600


def busy_cpu_seconds() -> float:
    """CPU seconds every core of this machine has spent on anything but idling."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def laid_out_run(folder: Path, backend: str) -> tuple[RunFolder, list[str]]:
    spec = JobSpec(model="builtin:tiny-llama", dataset="builtin:arithmetic", method="lora",
                   backend=backend, num_gpus=2, max_steps=10, micro_batch_size=4, seq_len=64,
                   precision="bf16", learning_rate=5e-3)
    run = RunFolder(folder)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv = build_torchrun_argv(spec, str(run.path), torchrun=torchrun)
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec), launch={"argv": argv, "env": {}})
    return run, argv


def one_launch(folder: Path, env: dict[str, str], *, backend: str,
               zygote: TrainerZygote | None) -> tuple[float, float]:
    run, argv = laid_out_run(folder, backend)
    cpu, wall = busy_cpu_seconds(), time.monotonic()
    if zygote is None:
        result = subprocess.run(argv, env=env, cwd=run.path, capture_output=True, text=True,
                                timeout=TIMEOUT_SECONDS)
        output = result.stdout + result.stderr
    else:
        result = zygote.run(argv, env=env, cwd=run.path, timeout_seconds=TIMEOUT_SECONDS)
        output = result.stdout
    cpu, wall = busy_cpu_seconds() - cpu, time.monotonic() - wall
    if result.returncode != 0:
        raise SystemExit(output[-4000:])
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--backend", choices=("fsdp", "zero2"), default="fsdp")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        env = {**os.environ, "TUNEDECK_HOME": str(scratch / "home"), "OMP_NUM_THREADS": "1",
               "GRADIO_ANALYTICS_ENABLED": "False"}
        zygote = TrainerZygote(env)
        try:
            one_launch(scratch / "warm-up", env, backend=arguments.backend, zygote=zygote)
            cold, forked = [], []
            for pair in range(arguments.pairs):
                cold.append(one_launch(scratch / f"cold-{pair}", env, backend=arguments.backend,
                                       zygote=None))
                forked.append(one_launch(scratch / f"forked-{pair}", env,
                                         backend=arguments.backend, zygote=zygote))
                print(f"pair {pair + 1}: cold {cold[-1][0]:.1f} CPU-s {cold[-1][1]:.1f} s, "
                      f"forked {forked[-1][0]:.1f} CPU-s {forked[-1][1]:.1f} s", flush=True)
        finally:
            zygote.close()
    cold_cpu, forked_cpu = (statistics.median(cpu for cpu, _ in runs) for runs in (cold, forked))
    cold_wall, forked_wall = (statistics.median(wall for _, wall in runs) for runs in (cold, forked))
    print(f"{arguments.backend} LoRA, 2 CPU ranks, 10 steps: cold {cold_cpu:.1f} CPU-s "
          f"({cold_wall:.1f} s), forked {forked_cpu:.1f} CPU-s ({forked_wall:.1f} s)")
    print(f"CPU ratio forked/cold: {forked_cpu / cold_cpu:.2f}; wall ratio: {forked_wall / cold_wall:.2f}")


if __name__ == "__main__":
    main()
