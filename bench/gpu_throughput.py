"""Tokens per second, model FLOPs utilisation and peak memory of the real trainer on one GPU.

A matrix of cells, each a few dozen steps of the trainer launched exactly as a worker
launches it, bf16, 1 GPU, on random-weight Llamas (bench/random_llama.py: about 1.1B, and
Llama-3.1-8B's shape) and long synthetic rows that fill seq_len: sizes x {lora, full} x
{zero2, fsdp} x seq_len x speed options (a cell's `--speed` value: none, or options joined
by "+": liger (kernels liger), fused (fused_optimizer), flash (attention flash, which needs
flash-attn), padding-free).
A row a cell: tokens/s, both MFUs the trainer's step events carry (trainer/mfu.py: `mfu`
counts the method's FLOPs, 6N full and about 4N LoRA; `mfu 6N` counts 6N for every
method; both add attention's), the peak reserved memory (torch.cuda.max_memory_reserved,
from rank 0's memory events), the memory planner's predicted peak for the same spec and
measured / predicted. A cell the planner says does not fit the card is skipped, saying so.
Target: MFU >= 40% for the full fine-tune.

The most telling cells run first (the first size's lora and full x zero2 and fsdp at the
first seq_len and speed value; then the second size's LoRA; then the rest), and with --budget-seconds no
cell starts that the time left would not see through (guessed from the longest cell of its
size so far, else twice the longest of any size).

Usage: .venv/bin/python bench/gpu_throughput.py [--sizes 1b,8b] [--methods lora,full]
       [--backends zero2,fsdp] [--seq-lens 2048,4096] [--speed none,liger,fused] [--steps N]
       [--micro-batch N] [--budget-seconds S]; without a CUDA GPU it says so and exits 0.
       Smoke test on a CPU: --allow-cpu --sizes tiny --seq-lens 64.
"""
from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from random_llama import SHAPES, build_random_llama, write_long_rows, write_model_config  # noqa: E402
from trainer_runs import run_plain_torchrun  # noqa: E402

from tunedeck.job_spec import JobSpec  # noqa: E402
from tunedeck.planner.gpu_cards import GpuSet, peak_flops_for  # noqa: E402
from tunedeck.planner.memory_plan import plan_strategies  # noqa: E402
from tunedeck.planner.shape_source import resolve_model_shape  # noqa: E402
from tunedeck.units import GB, MIB  # noqa: E402

GIB = 2**30
# Tokens a micro-batch (its rows are seq_len // this long) and steps, by size: enough steps
# for a steady median after start-up, few enough that the 8B cells stay short.
MICRO_BATCH_TOKENS = {"tiny": 128, "1b": 16384, "8b": 8192}
STEPS = {"tiny": 3, "1b": 20, "8b": 10}
# The card a CPU smoke test plans for.
CPU_STAND_IN_BYTES = 141 * GB
# A `--speed` value's parts -> the spec fields they set ("none": the defaults).
SPEED_OPTIONS = {"liger": {"kernels": "liger"}, "fused": {"fused_optimizer": True},
                 "flash": {"attention": "flash"}, "padding-free": {"padding_free": True}}


def speed_fields(speed: str) -> dict:
    """The spec fields of a `--speed` value such as "liger+fused"."""
    fields: dict = {}
    for part in speed.split("+"):
        if part != "none":
            fields.update(SPEED_OPTIONS[part])
    return fields


@dataclass(frozen=True)
class Cell:
    size: str
    method: str
    backend: str
    seq_len: int
    speed: str

    @property
    def name(self) -> str:
        return f"{self.size}-{self.method}-{self.backend}-s{self.seq_len}-{self.speed}"


def ordered_cells(*, sizes: list[str], methods: list[str], backends: list[str],
                  seq_lens: list[int], speeds: list[str]) -> list[Cell]:
    """Every cell, the most telling first: the first size at the first seq_len and speed
    value, then the second size's LoRA there, then the rest in table order."""
    cells = [Cell(size, method, backend, seq_len, speed) for size, seq_len, speed, method, backend
             in itertools.product(sizes, seq_lens, speeds, methods, backends)]

    def tier(cell: Cell) -> int:
        first_setting = cell.seq_len == seq_lens[0] and cell.speed == speeds[0]
        if first_setting and cell.size == sizes[0]:
            return 0
        if first_setting and cell.size in sizes[1:2] and cell.method == "lora":
            return 1
        return 2
    return sorted(cells, key=tier)


class Budget:
    """The seconds left for cells, and a guess of the next one's: the longest of its size
    so far, else twice the longest of any (a larger model, built on first use)."""

    def __init__(self, seconds: float | None, clock=time.monotonic):
        self._clock = clock
        self._deadline = clock() + seconds if seconds is not None else None
        self._seconds_by_size: dict[str, float] = {}

    def left(self) -> float:
        return self._deadline - self._clock() if self._deadline is not None else float("inf")

    def guess(self, size: str) -> float:
        if size in self._seconds_by_size:
            return self._seconds_by_size[size]
        return 2 * max(self._seconds_by_size.values(), default=0.0)

    def allows(self, size: str) -> bool:
        return self.guess(size) <= self.left()

    def spent(self, size: str, seconds: float) -> None:
        self._seconds_by_size[size] = max(seconds, self._seconds_by_size.get(size, 0.0))


def cell_spec(cell: Cell, folder: Path, *, steps: int, micro_batch: int) -> JobSpec:
    return JobSpec(name=f"gpu-{cell.name}", model=str(folder / cell.size),
                   dataset=str(folder / f"rows-{cell.seq_len}.jsonl"), method=cell.method,
                   backend=cell.backend, num_gpus=1, max_steps=steps, learning_rate=1e-5,
                   micro_batch_size=micro_batch, seq_len=cell.seq_len, precision="bf16",
                   **speed_fields(cell.speed))


def predicted_peak_bytes(spec: JobSpec, shape, card_bytes: float) -> float:
    return plan_strategies(spec, GpuSet(1, card_bytes / GB), shape)[spec.backend].breakdown.total


def measure(spec: JobSpec, folder: Path, *, timeout_seconds: float) -> dict:
    """The run's tokens/s, its steps' median MFUs (the first step left out, as the
    summary leaves it out) and rank 0's peak reserved memory."""
    run = run_plain_torchrun(folder / "home", spec, folder / spec.name, metrics=True,
                             timeout_seconds=timeout_seconds, stop_after_summary=True)
    steps = run.events(0, "step")[1:]
    reserved = [event.get("peak_reserved_mb") for event in run.events(0, "memory")]
    reserved = [value for value in reserved if value is not None]

    def median_of(field: str) -> float | None:
        values = [event[field] for event in steps if event.get(field) is not None]
        return statistics.median(values) if values else None
    return {"tokens_per_second": run.summary.tokens_per_second, "mfu": median_of("mfu"),
            "mfu_6n": median_of("mfu_6n"),
            "peak_reserved_bytes": max(reserved) * MIB if reserved else None}


HEADER = (f"{'model':<6} {'method':<6} {'backend':<7} {'seq':>5} {'speed':<12} {'mb':>3} "
          f"{'tokens/s':>10} {'MFU':>6} {'MFU 6N':>7} {'reserved GiB':>12} {'planned GiB':>11} "
          f"{'meas/plan':>9}")


def row_text(cell: Cell, micro_batch: int, rest: str) -> str:
    return (f"{cell.size:<6} {cell.method:<6} {cell.backend:<7} {cell.seq_len:>5} "
            f"{cell.speed:<12} {micro_batch:>3} {rest}")


def measured_text(measured: dict, predicted_bytes: float) -> str:
    def percent(value):
        return f"{value:.1%}" if value is not None else "n/a"
    reserved = measured["peak_reserved_bytes"]
    reserved_text = f"{reserved / GIB:>12.2f}" if reserved is not None else f"{'n/a':>12}"
    ratio_text = f"{reserved / predicted_bytes:>9.2f}" if reserved is not None else f"{'n/a':>9}"
    return (f"{measured['tokens_per_second']:>10,.0f} {percent(measured['mfu']):>6} "
            f"{percent(measured['mfu_6n']):>7} {reserved_text} "
            f"{predicted_bytes / GIB:>11.2f} {ratio_text}")


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

    def prepare(self, spec: JobSpec, size: str) -> None:
        if size not in self._built:
            build_random_llama(self.folder / size, SHAPES[size])
            self._built.add(size)
        # One rows file a seq_len, written again longer when a cell needs more rows.
        needed = spec.micro_batch_size * (spec.max_steps + 4)
        if self._rows_written.get(spec.seq_len, 0) < needed:
            write_long_rows(Path(spec.dataset), rows=needed, words_per_row=spec.seq_len)
            self._rows_written[spec.seq_len] = needed


def run_cell(spec: JobSpec, cells: CellFolder, *, predicted_bytes: float,
             timeout_seconds: float) -> str:
    """The cell's measured columns, or why there are none."""
    try:
        measured = measure(spec, cells.folder, timeout_seconds=timeout_seconds)
    except RuntimeError as error:
        print("\n".join(str(error).splitlines()[-15:]), file=sys.stderr, flush=True)
        return f"failed: {str(error).splitlines()[0]}"
    finally:
        shutil.rmtree(cells.folder / spec.name, ignore_errors=True)
    return measured_text(measured, predicted_bytes)


def run_matrix(cells: list[Cell], folder: Path, *, arguments: argparse.Namespace,
               card_bytes: float) -> None:
    budget = Budget(arguments.budget_seconds)
    cell_folder = CellFolder(folder)
    for cell in cells:
        micro_batch = arguments.micro_batch or max(1, MICRO_BATCH_TOKENS[cell.size] // cell.seq_len)
        spec = cell_spec(cell, folder, steps=arguments.steps or STEPS[cell.size],
                         micro_batch=micro_batch)
        predicted = predicted_peak_bytes(spec, cell_folder.model_shape(cell.size), card_bytes)
        if predicted > card_bytes:
            text = (f"skipped: plan says {predicted / GIB:.1f} GiB > card "
                    f"({card_bytes / GIB:.1f} GiB)")
        elif not budget.allows(cell.size):
            text = (f"not started: {budget.left():.0f} s of the budget left, a cell takes "
                    f"about {budget.guess(cell.size):.0f} s")
        else:
            # Building a size's model is not a cost of its next cell: timed apart.
            cell_folder.prepare(spec, cell.size)
            started = time.monotonic()
            text = run_cell(spec, cell_folder, predicted_bytes=predicted,
                            timeout_seconds=min(3600.0, budget.left() + 30))
            budget.spent(cell.size, time.monotonic() - started)
        print(row_text(cell, micro_batch, text), flush=True)


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    parser.add_argument("--allow-cpu", action="store_true", help="smoke-test on a CPU")
    arguments = parser.parse_args(argv)
    unknown = [size for size in arguments.sizes if size not in SHAPES]
    if unknown:
        parser.error(f"--sizes: unknown {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    unknown = [part for speed in arguments.speed for part in speed.split("+")
               if part != "none" and part not in SPEED_OPTIONS]
    if unknown:
        parser.error(f"--speed: unknown {', '.join(unknown)}; known: none, "
                     f"{', '.join(SPEED_OPTIONS)}")
    return arguments


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
    cells = ordered_cells(sizes=arguments.sizes, methods=arguments.methods,
                          backends=arguments.backends, seq_lens=arguments.seq_lens,
                          speeds=arguments.speed)
    print(f"device {device_name} ({card_bytes / GIB:.0f} GiB, dense bf16 peak "
          f"{peak / 1e12 if peak else float('nan'):.0f} TFLOP/s); bf16, 1 GPU; {len(cells)} cells")
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="tunedeck-gpu-") as directory:
        run_matrix(cells, Path(directory), arguments=arguments, card_bytes=card_bytes)
    print("MFU: the method's FLOPs (6N full, ~4N LoRA) + attention; MFU 6N: 6N for every "
          "method + attention. Target: MFU >= 40% for full fine-tunes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
