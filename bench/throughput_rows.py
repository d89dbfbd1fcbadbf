"""A row of bench/gpu_throughput.py's table, as text for the terminal and as markdown for
bench/results/: the cell, then what it measured or why it has no figures, beside the plan."""
from __future__ import annotations

from dataclasses import dataclass

from gpu_cells import Cell

from tunedeck.units import GIB

COLUMNS = ["model", "method", "backend", "seq", "speed", "mb", "tokens/s", "MFU", "MFU 6N",
           "allocated GiB", "reserved GiB", "planned GiB", "meas/plan"]
# The text table's widths, column by column (the speed and outcome columns grow as needed).
WIDTHS = [6, 6, 7, 5, 16, 3, 10, 6, 7, 13, 12, 11, 9]
HEADER = " ".join(f"{name:<{width}}" if index in (0, 1, 2, 4) else f"{name:>{width}}"
                  for index, (name, width) in enumerate(zip(COLUMNS, WIDTHS)))
NOTE = ("MFU: the method's FLOPs (6N full, ~4N LoRA) + attention; MFU 6N: 6N for every "
        "method + attention; allocated and reserved: rank 0's peaks (torch.cuda "
        "max_memory_allocated and max_memory_reserved; the gap is the allocator's cache); "
        "meas/plan: reserved over planned. Target: MFU >= 40% for full fine-tunes")


@dataclass(frozen=True)
class CellResult:
    """What became of a cell: its measured figures (tokens_per_second, mfu, mfu_6n,
    peak_allocated_bytes, peak_reserved_bytes), or an outcome saying why there are none
    ("failed: ...", "skipped: ...", "not started: ..."). No prediction for a spec refused."""
    predicted_bytes: float | None
    card_bytes: float
    measured: dict | None = None
    outcome: str = ""

    @property
    def plan_fits(self) -> bool:
        return self.predicted_bytes is None or self.predicted_bytes <= self.card_bytes

    @property
    def plan_text(self) -> str:
        return (f"plan says {self.predicted_bytes / GIB:.1f} GiB > card "
                f"({self.card_bytes / GIB:.1f} GiB)")


def figures(result: CellResult) -> list[str]:
    """The seven figure columns, from tokens/s to meas/plan; an outcome fills the first."""
    planned = "" if result.predicted_bytes is None else \
        f"{result.predicted_bytes / GIB:.2f}" + ("" if result.plan_fits else " (> card)")
    measured = result.measured
    if measured is None:
        return [result.outcome, "", "", "", "", planned, ""]
    allocated, reserved = measured["peak_allocated_bytes"], measured["peak_reserved_bytes"]
    return [f"{measured['tokens_per_second']:,.0f}", _percent(measured["mfu"]),
            _percent(measured["mfu_6n"]), _gib(allocated), _gib(reserved), planned,
            f"{reserved / result.predicted_bytes:.2f}" if reserved is not None else "n/a"]


def cell_columns(cell: Cell, micro_batch: int) -> list[str]:
    return [cell.size, cell.method, cell.backend, str(cell.seq_len), cell.speed, str(micro_batch)]


def markdown_row(cell: Cell, micro_batch: int, result: CellResult) -> list[str]:
    return [*cell_columns(cell, micro_batch), *figures(result)]


def text_row(cell: Cell, micro_batch: int, result: CellResult) -> str:
    values = cell_columns(cell, micro_batch)
    head = " ".join(f"{value:<{width}}" if index in (0, 1, 2, 4) else f"{value:>{width}}"
                    for index, (value, width) in enumerate(zip(values, WIDTHS)))
    if result.measured is None:
        # A skipped row already says what the plan said; a cell that ran anyway says it too.
        note = "" if result.plan_fits or result.outcome.startswith("skipped") \
            else f" ({result.plan_text}; run anyway)"
        return f"{head} {result.outcome}{note}"
    tail = " ".join(f"{value:>{width}}" for value, width in zip(figures(result), WIDTHS[6:]))
    return f"{head} {tail}" + ("" if result.plan_fits else f"  ({result.plan_text}; run anyway)")


def _percent(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "n/a"


def _gib(value: float | None) -> str:
    return f"{value / GIB:.2f}" if value is not None else "n/a"
