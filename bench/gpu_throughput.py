"""Tokens per second, model FLOPs utilisation and peak memory of the real trainer on one GPU.

Cells, each a few dozen steps of the trainer launched exactly as a worker launches it, bf16,
1 GPU, on random-weight Llamas (bench/random_llama.py: about 1.1B, and Llama-3.1-8B's shape)
and long synthetic rows that fill seq_len. A cell (bench/gpu_cells.py) is a size, a method, a
backend, a seq_len and speed options (none: the plain path, or of liger, auto, fused,
flash, padding-free, ckpt joined by "+"), and a micro-batch:
`--cells 8b/full/fsdp/4096/liger+ckpt+fused@2,...` (or `--cells-file`, one a line) runs those in that order; else a matrix sizes x methods x
backends x seq_lens x speed values, the most telling first (the first size's lora and full x
zero2 and fsdp at the first seq_len and speed value; then the second size's LoRA; then the
rest).
A row a cell: tokens/s, both MFUs the trainer's step events carry (trainer/mfu.py: `mfu`
counts the method's FLOPs, 6N full and about 4N LoRA; `mfu 6N` counts 6N for every
method; both add attention's), rank 0's peak allocated and reserved memory
(torch.cuda.max_memory_allocated and max_memory_reserved, from its memory events), the
memory planner's predicted peak for the same spec and reserved / predicted. A cell the
planner says does not fit the card is skipped, saying so, unless --run-unplanned runs it
anyway (to learn whether the plan is right). A cell that fails says why: the worker's triage
of its ranks' error notices (out of memory with the allocator's figures, say); the failing
rank's whole notice goes to stderr. Target: MFU >= 40% for the full fine-tune.

With --budget-seconds no cell starts that the time left would not see through (guessed from
the longest cell of its size so far, else twice the longest of any size). --markdown FILE
appends the table to FILE as markdown, row by row (bench/gpu_check.sh's record).

Usage: .venv/bin/python bench/gpu_throughput.py [--cells C1,C2 | --cells-file FILE |
       --sizes 1b,8b --methods lora,full --backends zero2,fsdp --seq-lens 2048,4096
       --speed none,liger,fused] [--steps N] [--micro-batch N] [--budget-seconds S]
       [--run-unplanned] [--markdown FILE]; without a CUDA GPU it says so and exits 0.
       Smoke test on a CPU: --allow-cpu --sizes tiny --seq-lens 64.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_runs import TrainerFailed, run_plain_torchrun  # noqa: E402  (first: it finds the repo)

from cell_budget import Budget  # noqa: E402
from gpu_cells import (CELL_FORM, SPEED_OPTIONS, Cell, grpo_fields, ordered_cells,  # noqa: E402
                       parse_cells, read_cells_file, speed_fields, unknown_speed_parts)
from markdown_table import MarkdownTable  # noqa: E402
from random_llama import SHAPES, build_random_llama, write_long_rows, write_model_config  # noqa: E402
from throughput_rows import (COLUMNS, GIB, HEADER, NOTE, CellResult, markdown_row,  # noqa: E402
                             text_row)

from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.planner.gpu_cards import GpuSet, peak_flops_for  # noqa: E402
from tunedeck.planner.memory_plan import spec_plan  # noqa: E402
from tunedeck.planner.shape_source import resolve_model_shape  # noqa: E402
from tunedeck.units import GB, MIB  # noqa: E402

# Tokens a micro-batch (its rows are seq_len // this long) and steps, by size: enough steps
# for a steady median after start-up, few enough that the 8B cells stay short.
MICRO_BATCH_TOKENS = {"tiny": 128, "1b": 16384, "8b": 8192}
STEPS = {"tiny": 3, "1b": 20, "8b": 10}
# Seconds to build and save a size's random model on the GPU (issue 28's H200 run): a
# cell whose model is not built yet needs them from the budget too.
BUILD_SECONDS = {"tiny": 1.0, "1b": 10.0, "8b": 30.0}
# The card a CPU smoke test plans for.
CPU_STAND_IN_BYTES = 141 * GB
# Lines of torchrun's output shown for a failed cell where no rank wrote an error notice.
OUTPUT_LINES_OF_A_FAILURE = 15


def micro_batch_of(cell: Cell, override: int | None) -> int:
    """The cell's own, else --micro-batch, else the size's tokens a micro-batch over seq_len."""
    return cell.micro_batch or override or max(1, MICRO_BATCH_TOKENS[cell.size] // cell.seq_len)


def cell_spec(cell: Cell, folder: Path, *, steps: int, micro_batch: int) -> JobSpec:
    fields = speed_fields(cell.speed, cell.backend)
    if fields.get("objective") == "grpo":
        fields.update(grpo_fields(micro_batch, cell.seq_len))
    return JobSpec(name=f"gpu-{cell.name}", model=str(folder / cell.size),
                   dataset=str(folder / f"rows-{cell.seq_len}.jsonl"), method=cell.method,
                   backend=cell.backend, num_gpus=1, max_steps=steps, learning_rate=1e-5,
                   micro_batch_size=micro_batch, seq_len=cell.seq_len, precision="bf16",
                   **fields)


def predicted_peak_bytes(spec: JobSpec, shape, card_bytes: float) -> float:
    """The plan for the cell's own strategy; the cells' rows fill seq_len (no padding)."""
    return spec_plan(spec, GpuSet(1, card_bytes / GB), shape, full_rows=True).breakdown.total


def measure(spec: JobSpec, folder: Path, *, timeout_seconds: float) -> dict:
    """The run's tokens/s, its steps' median MFUs (the first step left out, as the
    summary leaves it out) and rank 0's peak allocated and reserved memory."""
    run = run_plain_torchrun(folder / "home", spec, folder / spec.name, metrics=True,
                             timeout_seconds=timeout_seconds, stop_after_summary=True)
    steps = run.events(0, "step")[1:]
    memory = run.events(0, "memory")

    def median_of(field: str) -> float | None:
        values = [event[field] for event in steps if event.get(field) is not None]
        return statistics.median(values) if values else None

    def peak_bytes(field: str) -> float | None:
        values = [event[field] for event in memory if event.get(field) is not None]
        return max(values) * MIB if values else None
    measured = {"tokens_per_second": run.summary.tokens_per_second, "mfu": median_of("mfu"),
                "mfu_6n": median_of("mfu_6n"), "peak_allocated_bytes": peak_bytes("peak_mb"),
                "peak_reserved_bytes": peak_bytes("peak_reserved_mb")}
    if spec.objective == "grpo":
        measured["grpo"] = grpo_split(steps, rows=spec.micro_batch_size * spec.grad_accum)
    return measured


def grpo_split(steps: list[dict], *, rows: int) -> dict:
    """A GRPO cell's medians: completion tokens sampled a second, trained tokens a second
    (over the training part of the step), and the step's sampling/scoring/training seconds."""
    def median(field: str) -> float:
        return statistics.median(step[field] for step in steps)

    return {"sampled_tokens_per_second": statistics.median(
                step["completion_length"] * rows / step["sampling_seconds"] for step in steps),
            "trained_tokens_per_second": statistics.median(
                step["tokens"] / step["training_seconds"] for step in steps),
            "sampling_seconds": median("sampling_seconds"),
            "scoring_seconds": median("scoring_seconds"),
            "training_seconds": median("training_seconds"),
            "completion_length": median("completion_length")}


def grpo_line(cell: Cell, result: CellResult) -> str | None:
    """The line under a GRPO cell's row."""
    split = (result.measured or {}).get("grpo")
    if split is None:
        return None
    return (f"  {cell.text} grpo: {split['sampled_tokens_per_second']:,.0f} tokens sampled/s, "
            f"{split['trained_tokens_per_second']:,.0f} trained tokens/s; a step "
            f"{split['sampling_seconds']:.2f} s sampling + {split['scoring_seconds']:.3f} s "
            f"scoring + {split['training_seconds']:.2f} s training (completions "
            f"{split['completion_length']:.0f} tokens, median)")


class CellFolder:
    """The models (config first, for the planner; weights on a size's first run) and the
    rows files the cells share, in one temporary folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._shapes: dict = {}
        self._built: set[str] = set()
        self._rows_written: dict[int, int] = {}

    def model_shape(self, size: str):
        if size not in self._shapes:
            write_model_config(self.folder / size, SHAPES[size])
            self._shapes[size] = resolve_model_shape(str(self.folder / size))
        return self._shapes[size]

    def build_seconds(self, size: str) -> float:
        """What preparing a cell of `size` will take beyond the cell (0 once built)."""
        return 0.0 if size in self._built else BUILD_SECONDS[size]

    def prepare(self, spec: JobSpec, size: str) -> None:
        if size not in self._built:
            build_random_llama(self.folder / size, SHAPES[size])
            self._built.add(size)
        # One rows file a seq_len, written again longer when a cell needs more rows.
        needed = spec.micro_batch_size * (spec.max_steps + 4)
        if self._rows_written.get(spec.seq_len, 0) < needed:
            write_long_rows(Path(spec.dataset), rows=needed, words_per_row=spec.seq_len)
            self._rows_written[spec.seq_len] = needed


def run_cell(spec: JobSpec, cells: CellFolder, *, predicted_bytes: float, card_bytes: float,
             timeout_seconds: float) -> CellResult:
    """The cell's measured figures, or why there are none: the failure's cause in the
    row, the failing rank's whole notice on stderr."""
    started = time.monotonic()
    try:
        measured = measure(spec, cells.folder, timeout_seconds=timeout_seconds)
    except TrainerFailed as failure:
        details = failure.notice or "\n".join(
            failure.output.splitlines()[-OUTPUT_LINES_OF_A_FAILURE:])
        print(f"{spec.name} failed: {details}", file=sys.stderr, flush=True)
        # How long a failure took hints at where it was (a timeout's cause says it).
        seconds = "" if failure.timed_out else f" ({time.monotonic() - started:.0f} s in)"
        return CellResult(predicted_bytes, card_bytes, outcome=f"failed: {failure.cause}{seconds}")
    finally:
        shutil.rmtree(cells.folder / spec.name, ignore_errors=True)
    return CellResult(predicted_bytes, card_bytes, measured=measured)


def run_matrix(cells: list[Cell], folder: Path, *, arguments: argparse.Namespace,
               card_bytes: float, table: MarkdownTable | None = None) -> list[str]:
    """Each cell's row; returns the lines a GRPO cell adds under the table."""
    table = table or MarkdownTable(None, COLUMNS)
    notes: list[str] = []
    budget = Budget(arguments.budget_seconds)
    cell_folder = CellFolder(folder)
    for cell in cells:
        micro_batch = micro_batch_of(cell, arguments.micro_batch)
        try:
            spec = cell_spec(cell, folder, steps=arguments.steps or STEPS[cell.size],
                             micro_batch=micro_batch)
        except ValueError as error:  # the spec's own checks: a row, and the next cell runs
            result = CellResult(None, card_bytes,
                                outcome=f"refused by the job spec: {spec_refusal(error)}")
        else:
            predicted = predicted_peak_bytes(spec, cell_folder.model_shape(cell.size), card_bytes)
            result = matrix_cell(spec, cell, cell_folder, budget, CellResult(predicted, card_bytes),
                                 run_unplanned=arguments.run_unplanned)
        print(text_row(cell, micro_batch, result), flush=True)
        table.add(markdown_row(cell, micro_batch, result))
        split_line = grpo_line(cell, result)
        if split_line:
            print(split_line, flush=True)
            notes.append(split_line.strip())
    return notes


def spec_refusal(error: ValueError) -> str:
    """pydantic's first message alone (its whole text spans lines and links its docs)."""
    errors = getattr(error, "errors", None)
    return errors()[0]["msg"] if callable(errors) else str(error)


def matrix_cell(spec: JobSpec, cell: Cell, cell_folder: CellFolder, budget: Budget,
                planned: CellResult, *, run_unplanned: bool) -> CellResult:
    """The cell run, or why not: the plan says it does not fit, or the budget is spent."""
    build_seconds = cell_folder.build_seconds(cell.size)
    if not planned.plan_fits and not run_unplanned:
        return replace(planned, outcome=f"skipped: {planned.plan_text}")
    if not budget.allows(cell.size, extra_seconds=build_seconds):
        return replace(planned, outcome=budget.refusal(cell.size, extra_seconds=build_seconds))
    # Building a size's model is not a cost of its next cell: timed apart.
    cell_folder.prepare(spec, cell.size)
    started = time.monotonic()
    result = run_cell(spec, cell_folder, predicted_bytes=planned.predicted_bytes,
                      card_bytes=planned.card_bytes,
                      timeout_seconds=min(3600.0, budget.left() + 30))
    budget.spent(cell.size, time.monotonic() - started)
    return result


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def cells_argument(text: str) -> list[Cell]:
    try:
        return parse_cells(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--cells", type=cells_argument, default=None,
                        help=f"these cells in this order, comma-separated: {CELL_FORM}")
    chosen.add_argument("--cells-file", type=Path, default=None,
                        help="the cells in this order, one a line (# comments)")
    parser.add_argument("--sizes", type=comma_list, default=["1b", "8b"],
                        help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--methods", type=comma_list, default=["lora", "full"])
    parser.add_argument("--backends", type=comma_list, default=["zero2", "fsdp"])
    parser.add_argument("--seq-lens", type=lambda text: [int(part) for part in comma_list(text)],
                        default=[2048, 4096])
    parser.add_argument("--speed", type=comma_list, default=["none", "liger", "fused"],
                        help=f"speed options a cell: none, or of {', '.join(SPEED_OPTIONS)} "
                             "joined by +")
    parser.add_argument("--steps", type=int, default=None, help="default: by size")
    parser.add_argument("--micro-batch", type=int, default=None,
                        help="default: a size's tokens a micro-batch over seq_len")
    parser.add_argument("--budget-seconds", type=float, default=None)
    parser.add_argument("--run-unplanned", action="store_true",
                        help="run a cell the plan says does not fit, reporting both")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="append the table to this file as markdown")
    parser.add_argument("--allow-cpu", action="store_true", help="smoke-test on a CPU")
    arguments = parser.parse_args(argv)
    if arguments.cells_file is not None:
        try:
            arguments.cells = read_cells_file(arguments.cells_file)
        except (OSError, ValueError) as error:
            parser.error(f"--cells-file: {error}")
    unknown = [size for size in arguments.sizes if size not in SHAPES]
    if unknown:
        parser.error(f"--sizes: unknown {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    unknown = [part for speed in arguments.speed for part in unknown_speed_parts(speed)]
    if unknown:
        parser.error(f"--speed: unknown {', '.join(unknown)}; known: none, "
                     f"{', '.join(SPEED_OPTIONS)}")
    return arguments


def chosen_cells(arguments: argparse.Namespace) -> list[Cell]:
    if arguments.cells is not None:
        return arguments.cells
    return ordered_cells(sizes=arguments.sizes, methods=arguments.methods,
                         backends=arguments.backends, seq_lens=arguments.seq_lens,
                         speeds=arguments.speed)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    import torch

    if not torch.cuda.is_available() and not arguments.allow_cpu:
        print("gpu_throughput: no CUDA GPU here; skipped")
        return 0
    on_gpu = torch.cuda.is_available()
    device_name = torch.cuda.get_device_name(0) if on_gpu else "cpu"
    card_bytes = torch.cuda.get_device_properties(0).total_memory if on_gpu else CPU_STAND_IN_BYTES
    peak = peak_flops_for(device_name)
    cells = chosen_cells(arguments)
    device = (f"device {device_name} ({card_bytes / GIB:.0f} GiB, dense bf16 peak "
              f"{peak / 1e12 if peak else float('nan'):.0f} TFLOP/s); bf16, 1 GPU; "
              f"{len(cells)} cells")
    print(device)
    print(HEADER, flush=True)
    table = MarkdownTable(arguments.markdown, COLUMNS)
    table.start("Throughput (bench/gpu_throughput.py)", (device,))
    with tempfile.TemporaryDirectory(prefix="tunedeck-gpu-") as directory:
        notes = run_matrix(cells, Path(directory), arguments=arguments, card_bytes=card_bytes,
                           table=table)
    print(NOTE)
    table.end((NOTE, *notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
