"""The memory planner against the GPU: predicted peak per GPU against the CUDA allocator's
peaks (`max_memory_allocated` and `max_memory_reserved`) for a small matrix of real runs on
one GPU.

A random-weight Llama of about 1B parameters (bench/random_llama.py); cells
{full, lora} x {zero2, fsdp} x the sequence lengths x {without, with activation
checkpointing} (--methods, --backends and --checkpointing choose fewer), bf16, micro-batch 4, a few
steps each. For each it prints the planner's total (tunedeck/planner/memory_plan.py), rank
0's measured peak allocated and reserved memory, and the error of each (measured /
predicted - 1; the gap between the two is the allocator's caching and fragmentation). A
cell that fails is a row with its cause, and the rest run on. Target: the reserved peak
within 10% everywhere.

Usage: .venv/bin/python bench/gpu_memory_plan.py [--steps 3] [--seq-lens 512,2048]
       [--methods full,lora] [--backends zero2,fsdp] [--checkpointing off,on] [--micro-batch 4]
       [--budget-seconds S: no cell starts that the time left would not see through]
       [--markdown FILE: append the table as markdown]; without a CUDA GPU it says so and
       exits 0 (--allow-cpu runs the pipeline on a tiny model, where there is no allocator
       to measure).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_runs import TrainerFailed, run_plain_torchrun  # noqa: E402  (first: it finds the repo)

from cell_budget import Budget  # noqa: E402
from markdown_table import MarkdownTable  # noqa: E402
from random_llama import (add_model_arguments, build_random_llama, shape_from_arguments,  # noqa: E402
                          write_long_rows)

from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.planner.gpu_cards import GpuSet  # noqa: E402
from tunedeck.planner.memory_plan import spec_plan
from tunedeck.planner.shape_source import resolve_model_shape  # noqa: E402
from tunedeck.units import GB, MIB  # noqa: E402

COLUMNS = ["cell", "predicted GB", "allocated GB", "reserved GB", "error (reserved)",
           "error (allocated)"]
HEADER = (f"{'cell':<32} {'predicted GB':>13} {'allocated GB':>13} {'reserved GB':>12} "
          f"{'error':>8} {'alloc err':>9}")
BUDGET_KIND = "cell"  # every cell is of one model: one guess for all
CHECKPOINTING = {"off": False, "on": True}


def cell_spec(folder: Path, *, method: str, backend: str, seq_len: int, checkpointing: bool,
              arguments) -> JobSpec:
    switch = {"activation_checkpointing": checkpointing}
    return JobSpec(name=f"plan-{method}-{backend}-{seq_len}-{int(checkpointing)}",
                   model=str(folder / "model"), dataset=str(folder / "rows.jsonl"),
                   method=method, backend=backend, num_gpus=1, max_steps=arguments.steps,
                   learning_rate=1e-5, micro_batch_size=arguments.micro_batch, seq_len=seq_len,
                   precision="bf16", kernels="none",  # the plain path, whatever the default
                   **{backend: switch})  # the backend's own section


def cell_label(spec: JobSpec) -> str:
    checkpointing = "ckpt" if spec.activation_checkpointing else "no-ckpt"
    return f"{spec.method}/{spec.backend}/s{spec.seq_len}/{checkpointing}"


def measured_peaks_gb(spec: JobSpec, folder: Path, *, timeout_seconds: float) -> tuple:
    """Rank 0's peak allocated and reserved memory in GB (None where not measured: a CPU)."""
    result = run_plain_torchrun(folder / "home", spec, folder / spec.name, metrics=True,
                                stop_after_summary=True, timeout_seconds=timeout_seconds)
    memory = result.events(0, "memory")

    def peak(field: str) -> float | None:
        values = [event[field] for event in memory if event.get(field) is not None]
        return max(values) * MIB / GB if values else None
    return peak("peak_mb"), peak("peak_reserved_mb")


def plan_row(spec: JobSpec, folder: Path, predicted_gb: float, *,
             timeout_seconds: float) -> tuple[list[str], float | None]:
    """The cell's columns and its reserved error (None where nothing was measured); a
    failed cell's row says why, its failing rank's whole notice goes to stderr."""
    label = cell_label(spec)
    try:
        allocated, reserved = measured_peaks_gb(spec, folder, timeout_seconds=timeout_seconds)
    except TrainerFailed as failure:
        print(f"{spec.name} failed: {failure.notice or failure.output[-2000:]}",
              file=sys.stderr, flush=True)
        return [label, f"{predicted_gb:.2f}", f"failed: {failure.cause}", "", "", ""], None

    def gb(value):
        return f"{value:.2f}" if value is not None else "n/a"

    def error(value):
        return f"{value / predicted_gb - 1:+.1%}" if value is not None else ""
    error_reserved = reserved / predicted_gb - 1 if reserved is not None else None
    return ([label, f"{predicted_gb:.2f}", gb(allocated), gb(reserved), error(reserved),
             error(allocated)], error_reserved)


def row_text(values: list[str]) -> str:
    label, predicted, allocated, *rest = values
    if allocated.startswith("failed"):
        return f"{label:<32} {predicted:>13} {allocated}"
    reserved, error_reserved, error_allocated = rest
    return (f"{label:<32} {predicted:>13} {allocated:>13} {reserved:>12} {error_reserved:>8} "
            f"{error_allocated:>9}")


def plan_cells(folder: Path, arguments: argparse.Namespace) -> list[JobSpec]:
    return [cell_spec(folder, method=method, backend=backend, seq_len=seq_len,
                      checkpointing=CHECKPOINTING[checkpointing], arguments=arguments)
            for method, backend, seq_len, checkpointing in itertools.product(
                arguments.methods, arguments.backends, arguments.seq_lens, arguments.checkpointing)]


def run_cells(folder: Path, arguments: argparse.Namespace, *, budget: Budget,
              table: MarkdownTable) -> float:
    """Every cell's row, printed and in the table; the worst |reserved error|."""
    shape = resolve_model_shape(str(folder / "model"))
    worst = 0.0
    for spec in plan_cells(folder, arguments):
        # The rows fill seq_len: no padding, so no mask to plan for.
        predicted_gb = spec_plan(spec, GpuSet(1, 141), shape, full_rows=True).breakdown.total / GB
        if not budget.allows(BUDGET_KIND):
            values = [cell_label(spec), f"{predicted_gb:.2f}", budget.refusal(BUDGET_KIND), "", "", ""]
        else:
            started = time.monotonic()
            values, error = plan_row(spec, folder, predicted_gb,
                                     timeout_seconds=min(1800.0, budget.left() + 60))
            budget.spent(BUDGET_KIND, time.monotonic() - started)
            worst = max(worst, abs(error)) if error is not None else worst
        print(row_text(values), flush=True)
        table.add(values)
    return worst


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seq-lens", type=lambda text: [int(part) for part in comma_list(text)],
                        default=[512, 2048])
    parser.add_argument("--methods", type=comma_list, default=["full", "lora"])
    parser.add_argument("--backends", type=comma_list, default=["zero2", "fsdp"])
    parser.add_argument("--checkpointing", type=comma_list, default=["off", "on"],
                        help="activation checkpointing: off, on or both (off,on)")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--budget-seconds", type=float, default=None)
    parser.add_argument("--markdown", type=Path, default=None,
                        help="append the table to this file as markdown")
    add_model_arguments(parser)
    arguments = parser.parse_args(argv)
    unknown = [value for value in arguments.checkpointing if value not in CHECKPOINTING]
    if unknown:
        parser.error(f"--checkpointing: unknown {', '.join(unknown)}; known: off, on")
    return arguments


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    import torch

    if not torch.cuda.is_available() and not arguments.allow_cpu:
        print("gpu_memory_plan: no CUDA GPU here; skipped")
        return 0
    budget = Budget(arguments.budget_seconds)
    table = MarkdownTable(arguments.markdown, COLUMNS)
    table.start("Memory plan (bench/gpu_memory_plan.py)",
                (f"1 GPU, bf16, micro-batch {arguments.micro_batch}, {arguments.steps} steps a "
                 f"cell; the model: {shape_from_arguments(arguments)}",))
    with tempfile.TemporaryDirectory(prefix="tunedeck-plan-") as directory:
        folder = Path(directory)
        build_random_llama(folder / "model", shape_from_arguments(arguments))
        write_long_rows(folder / "rows.jsonl", rows=arguments.micro_batch * (arguments.steps + 4),
                        words_per_row=max(arguments.seq_lens))
        print(HEADER, flush=True)
        worst = run_cells(folder, arguments, budget=budget, table=table)
    summary = f"worst |error| of the reserved peak: {worst:.1%} (target <= 10%)"
    print(summary)
    table.end((summary,))
    return 0


if __name__ == "__main__":
    sys.exit(main())
