"""The job page's "predicted against measured" memory table: the planner's bytes per GPU for
the job's spec beside what each rank reported holding (and, on a GPU, its peak)."""
from __future__ import annotations

from typing import Any

from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics.figures import PEAK_RESERVED_MB
from tunedeck.planner.memory_plan import Breakdown, spec_plan
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.shape_source import resolve_model_shape
from tunedeck.units import GB, MB, MIB

PARTS = ("params", "grads", "optimizer")


def memory_comparison_markdown(spec: JobSpec, metrics: dict[str, list]) -> str:
    """A Markdown table once ranks have reported, else an empty string."""
    footprints = metrics.get("footprint") or []
    if not footprints:
        return ""
    try:
        strategy, planned = planned_breakdown(spec)
    except ValueError as error:  # a model folder only the worker's host can see
        return f"No memory plan for this job: {error}"
    peaks = peak_reserved_gb_by_rank(metrics.get("memory") or [])
    header = ["rank", *(f"{part} MB (planned)" for part in PARTS), "peak GB (planned total)"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for footprint in footprints:
        cells = [str(footprint["rank"])]
        for part in PARTS:
            measured = footprint.get(f"{part}_bytes") or 0
            cells.append(f"{measured / MB:,.2f} ({getattr(planned, part) / MB:,.2f})")
        peak = peaks.get(footprint["rank"])
        cells.append(f"{peak:.2f} ({planned.total / GB:.2f})" if peak is not None
                     else f"n/a on CPU ({planned.total / GB:.2f})")
        lines.append("| " + " | ".join(cells) + " |")
    return (f"Planned for `{strategy}` by the memory planner; measured on each rank's tensors "
            "after its first update (peak: the CUDA allocator's reserved memory).\n\n"
            + "\n".join(lines))


def planned_breakdown(spec: JobSpec) -> tuple[str, Breakdown]:
    """The job's strategy and the planner's bytes per GPU under it, as this table plans them
    (bench/gpu_e2e.py compares the same figures). ValueError when the model's shape cannot
    be read here."""
    planned = spec_plan(spec, GpuSet(spec.num_gpus, 80, spec.num_nodes),
                        resolve_model_shape(spec.model))
    return planned.name, planned.breakdown


def peak_reserved_gb_by_rank(memory: list[dict[str, Any]]) -> dict[int, float]:
    """Each rank's highest peak reserved memory (the CUDA allocator's) in GB, from its memory
    readings; a rank on a CPU reports none."""
    peaks: dict[int, float] = {}
    for reading in memory:
        value = reading.get(PEAK_RESERVED_MB.field)
        if value is not None:
            peaks[reading["rank"]] = max(peaks.get(reading["rank"], 0.0), value * MIB / GB)
    return peaks
