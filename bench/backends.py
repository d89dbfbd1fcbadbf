"""ZeRO-2 against FSDP, cell by cell: step time and the bytes each rank holds.

For every cell of {zero2, fsdp} x {lora, qlora, full} x {bf16, fp16, fp32} this host can
run (the rest are listed with the reason they are refused), the real trainer runs on
`--ranks` local ranks under plain torchrun and reports, per rank, the bytes of parameters,
gradients and optimizer state it holds (measured on its tensors after the first step), and
the median step time. Beside each measured figure: the memory planner's prediction for the
same spec (tunedeck/planner/memory_plan.py) and the ratio measured / planned, the figure the planner
is held to (within 2%). Last, FSDP's step time as a ratio of ZeRO-2's, per method/precision.

Usage: .venv/bin/python bench/backends.py [--steps 12] [--ranks 2] [--seq-len 64]
       [--model builtin:tiny-llama] [--cells zero2:lora:bf16,fsdp:full:bf16]
On CPU ranks absolute step times mean little; the byte figures and the ratios are the point.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_runs import run_plain_torchrun  # noqa: E402

from tunedeck.spec.fields import BACKEND_NAMES, METHODS, PRECISIONS  # noqa: E402
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.gpu_cards import GpuSet  # noqa: E402
from tunedeck.planner.memory_plan import plan_strategies
from tunedeck.planner.shape_source import resolve_model_shape  # noqa: E402
from tunedeck.spec.text import format_validation_error  # noqa: E402

PARTS = ("params", "grads", "optimizer")


def cell_spec(backend: str, method: str, precision: str, arguments) -> JobSpec:
    return JobSpec(name=f"bench-{backend}-{method}-{precision}", model=arguments.model,
                   dataset="builtin:arithmetic", backend=backend, method=method,
                   precision=precision, num_gpus=arguments.ranks, max_steps=arguments.steps,
                   learning_rate=1e-3, micro_batch_size=4, seq_len=arguments.seq_len)


def refusal(backend: str, method: str, precision: str, arguments) -> str | None:
    """Why this cell cannot run here (the spec's or the worker preflight's words), or None."""
    from pydantic import ValidationError

    from worker.input_check import host_problem

    try:
        spec = cell_spec(backend, method, precision, arguments)
    except ValidationError as error:
        return format_validation_error(error)
    return host_problem(spec)


def planned_bytes(spec: JobSpec) -> dict[str, float]:
    plan = plan_strategies(spec, GpuSet(spec.num_gpus, 80), resolve_model_shape(spec.model))
    breakdown = plan[spec.backend].breakdown
    return {"params": breakdown.params, "grads": breakdown.grads, "optimizer": breakdown.optimizer}


def measure(home: Path, spec: JobSpec, run_dir: Path) -> tuple[float, list[dict]]:
    result = run_plain_torchrun(home, spec, run_dir, metrics=True)
    footprints = [result.events(rank, "footprint")[0] for rank in range(spec.num_gpus)]
    return result.summary.median_step_seconds, footprints


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--model", default="builtin:tiny-llama")
    parser.add_argument("--cells", default="", help="backend:method:precision,... (default all)")
    arguments = parser.parse_args()
    cells = ([tuple(cell.split(":")) for cell in arguments.cells.split(",")] if arguments.cells
             else [(b, m, p) for m in METHODS for p in PRECISIONS for b in BACKEND_NAMES])
    step_seconds: dict[tuple[str, str, str], float] = {}
    worst_ratio = 1.0
    print(f"{'cell':<20} {'rank':>4} {'step s':>8} " + " ".join(
        f"{part + ' B (planned, ratio)':>34}" for part in PARTS))
    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-backends-") as folder:
        home = Path(folder)
        for backend, method, precision in cells:
            name = f"{backend}/{method}/{precision}"
            why = refusal(backend, method, precision, arguments)
            if why:
                print(f"{name:<20} refused: {why.splitlines()[0][:150]}")
                continue
            spec = cell_spec(backend, method, precision, arguments)
            seconds, footprints = measure(home, spec, home / name.replace("/", "-"))
            step_seconds[(backend, method, precision)] = seconds
            planned = planned_bytes(spec)
            for rank, footprint in enumerate(footprints):
                figures = []
                for part in PARTS:
                    measured = footprint[f"{part}_bytes"]
                    ratio = measured / planned[part] if planned[part] else float("nan")
                    if planned[part]:
                        worst_ratio = max(worst_ratio, ratio, 1 / ratio if ratio else 1.0)
                    figures.append(f"{measured:>12,} ({planned[part]:>12,.0f}, {ratio:5.3f})")
                print(f"{name if rank == 0 else '':<20} {rank:>4} {seconds:>8.3f} " + " ".join(figures),
                      flush=True)
    print("\nFSDP step time / ZeRO-2 step time (same method and precision):")
    for method in METHODS:
        for precision in PRECISIONS:
            zero2, fsdp = (step_seconds.get((b, method, precision)) for b in BACKEND_NAMES)
            if zero2 and fsdp:
                print(f"  {method}/{precision}: {fsdp / zero2:.2f}")
    print(f"\nworst measured/planned ratio over every cell and part: {worst_ratio:.4f} "
          "(the planner is held to within 1.02)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
