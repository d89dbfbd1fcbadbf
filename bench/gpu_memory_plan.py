"""The memory planner against the GPU: predicted peak per GPU against the CUDA allocator's
`max_memory_reserved` for a small matrix of real runs on one GPU.

A random-weight Llama of about 1B parameters (bench/random_llama.py); cells
{full, lora} x {zero2, fsdp} x two sequence lengths x {with, without activation
checkpointing}, bf16, micro-batch 4, a few steps each. For each it prints the planner's
total (tunedeck/planner/memory_plan.py), the measured peak reserved memory of rank 0 and the error
(measured / predicted - 1). Target: within 10% everywhere.

Usage: .venv/bin/python bench/gpu_memory_plan.py [--steps 3] [--seq-lens 512,2048]
       [--micro-batch 4] [--budget-seconds S: no cell starts after S seconds]; without a CUDA GPU it says so and exits 0 (--allow-cpu runs the
       pipeline on a tiny model, where there is no allocator to measure).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from random_llama import (add_model_arguments, build_random_llama, shape_from_arguments,  # noqa: E402
                          write_long_rows)
from trainer_runs import run_plain_torchrun  # noqa: E402

from tunedeck.job_spec import JobSpec  # noqa: E402
from tunedeck.planner.memory_plan import GpuSet, plan_strategies  # noqa: E402
from tunedeck.planner.shape_source import resolve_model_shape  # noqa: E402
from tunedeck.units import GB, MIB  # noqa: E402


def cell_spec(folder: Path, *, method: str, backend: str, seq_len: int, checkpointing: bool,
              arguments) -> JobSpec:
    switch = {"activation_checkpointing": checkpointing}
    return JobSpec(name=f"plan-{method}-{backend}-{seq_len}-{int(checkpointing)}",
                   model=str(folder / "model"), dataset=str(folder / "rows.jsonl"),
                   method=method, backend=backend, num_gpus=1, max_steps=arguments.steps,
                   learning_rate=1e-5, micro_batch_size=arguments.micro_batch, seq_len=seq_len,
                   precision="bf16", **({"zero2": switch} if backend == "zero2" else {"fsdp": switch}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seq-lens", default="512,2048")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--budget-seconds", type=float, default=None)
    add_model_arguments(parser)
    arguments = parser.parse_args()
    import torch

    if not torch.cuda.is_available() and not arguments.allow_cpu:
        print("gpu_memory_plan: no CUDA GPU here; skipped")
        return 0
    seq_lens = [int(value) for value in arguments.seq_lens.split(",")]
    worst = 0.0
    deadline = time.monotonic() + (arguments.budget_seconds or float("inf"))
    with tempfile.TemporaryDirectory(prefix="tunedeck-plan-") as directory:
        folder = Path(directory)
        build_random_llama(folder / "model", shape_from_arguments(arguments))
        write_long_rows(folder / "rows.jsonl", rows=arguments.micro_batch * (arguments.steps + 4),
                        words_per_row=max(seq_lens))
        shape = resolve_model_shape(str(folder / "model"))
        print(f"{'cell':<32} {'predicted GB':>13} {'measured GB':>12} {'error':>8}")
        for method, backend, seq_len, checkpointing in itertools.product(
                ("full", "lora"), ("zero2", "fsdp"), seq_lens, (False, True)):
            if time.monotonic() > deadline:
                print(f"budget of {arguments.budget_seconds:.0f} s spent: no more cells")
                break
            spec = cell_spec(folder, method=method, backend=backend, seq_len=seq_len,
                             checkpointing=checkpointing, arguments=arguments)
            predicted = plan_strategies(spec, GpuSet(1, 141), shape)[backend].breakdown.total / GB
            result = run_plain_torchrun(folder / "home", spec, folder / spec.name, metrics=True,
                                        stop_after_summary=True)
            peaks = [event.get("peak_reserved_mb") for event in result.events(0, "memory")]
            measured = max((peak for peak in peaks if peak is not None), default=None)
            label = f"{method}/{backend}/s{seq_len}/{'ckpt' if checkpointing else 'no-ckpt'}"
            if measured is None:
                print(f"{label:<32} {predicted:>13.2f} {'n/a':>12} {'':>8}")
                continue
            measured_gb = measured * MIB / GB
            error = measured_gb / predicted - 1
            worst = max(worst, abs(error))
            print(f"{label:<32} {predicted:>13.2f} {measured_gb:>12.2f} {error:>+8.1%}", flush=True)
    print(f"worst |error|: {worst:.1%} (target <= 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
