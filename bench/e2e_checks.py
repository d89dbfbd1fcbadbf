"""The checks of bench/gpu_e2e.py: what one finished job left in the database and its run
folder, read the way the job page reads it (`read_job_series`, the page's memory plan).

Each check is a pure function of what was read, so the same code judges a GPU run and the
CPU run CI makes; `on_gpu` says which figures the product stores on each.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.ui.job_page.planned_memory import (memory_comparison_markdown, peak_reserved_gb_by_rank,
                                            planned_breakdown)
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.states import SUCCEEDED
from tunedeck.run_folder import RunFolder
from tunedeck.units import GB, MIB, format_size
from worker.sampler import visible_gpu_ids

# The measured peak against the plan: the planner's golden tests hold it to 10%; here a
# reading far outside this band means a broken figure (a unit, a missing reading).
PLAN_RATIO_BAND = (0.75, 1.25)
ALLOCATOR_FIELDS = ("allocated_mb", "reserved_mb", "peak_mb", "peak_reserved_mb")
NEW_TOKENS = 4


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    found: str  # what was found, in words and figures


@dataclass(frozen=True)
class FinishedJob:
    """What the checks read: the job's row fields, its series as the page reads them, its
    run folder."""

    status: str
    error: str | None
    seconds: float | None  # from running to finished
    spec: JobSpec
    series: dict[str, list[dict[str, Any]]]
    run: RunFolder


def job_check(job: FinishedJob) -> Check:
    if job.status != SUCCEEDED:
        first_line = (job.error or "no error recorded").strip().splitlines()[0]
        return Check("job", False, f"{job.status}: {first_line}")
    steps = len(rank_zero(job.series["train"]))
    return Check("job", True, f"succeeded, {steps} step rows, {job.seconds or 0:.0f} s running")


def device_samples_check(job: FinishedJob, *, on_gpu: bool) -> Check:
    """On a GPU: the worker's NVML samples of exactly the GPUs the job was given. On CPU
    ranks there is no GPU row; the sampler stores each rank's process (RSS, CPU%) instead."""
    gpu_rows, processes = job.series["gpus"], rank_zero(job.series["processes"])
    if not on_gpu:
        rss = [row["rss_mb"] for row in processes if row.get("rss_mb")]
        passed = not gpu_rows and bool(rss)
        return Check("device samples", passed,
                     f"{len(gpu_rows)} GPU rows; {len(rss)} samples of rank 0's process, "
                     f"RSS peak {mib_text(max(rss, default=0))}")
    given = sampled_gpu_indices(launch_environment(job.run).get("CUDA_VISIBLE_DEVICES"))
    rows = [row for row in gpu_rows if row["gpu"] in given]
    used = [row["used_mb"] for row in rows if row.get("used_mb")]
    total = max((row.get("total_mb") or 0 for row in rows), default=0)
    passed = bool(given) and len(used) == len(rows) > 0 and total > 0
    return Check("device samples", passed,
                 f"{len(rows)} NVML samples of GPU {', '.join(map(str, sorted(given)))}; "
                 f"peak used {mib_text(max(used, default=0))} of {mib_text(total)}")


def memory_events_check(job: FinishedJob, *, on_gpu: bool) -> Check:
    """The trainer's memory readings: the CUDA allocator's figures on a GPU; on a CPU rank
    those are null and only the rank's RSS is read."""
    readings = rank_zero(job.series["memory"])
    if not readings:
        return Check("memory events", False, "no memory readings of rank 0")
    last = readings[-1]
    if on_gpu:
        passed = all(isinstance(last.get(field), (int, float)) and last[field] > 0
                     for field in ALLOCATOR_FIELDS)
        return Check("memory events", passed,
                     f"{len(readings)} readings; peak allocated {mib_text(last.get('peak_mb'))}"
                     f", peak reserved {mib_text(last.get('peak_reserved_mb'))}")
    passed = all(last.get(field) is None for field in ALLOCATOR_FIELDS) and bool(last.get("rss_mb"))
    return Check("memory events", passed,
                 f"{len(readings)} readings on {last.get('device')}: allocator figures null, "
                 f"RSS {mib_text(last.get('rss_mb'))}")


def planned_memory_check(job: FinishedJob, *, on_gpu: bool) -> Check:
    """The job page's planned-against-measured table has rank 0's row; on a GPU its peak
    reserved memory is within PLAN_RATIO_BAND of the plan, on a CPU the page says n/a."""
    try:
        strategy, planned = planned_breakdown(job.spec)
    except ValueError as error:
        return Check("planned vs measured", False, f"no plan: {error}")
    table = memory_comparison_markdown(job.spec, job.series)
    has_row = any(line.startswith("| 0 |") for line in table.splitlines())
    planned_text = f"planned {format_size(planned.total / GB)} ({strategy})"
    if not on_gpu:
        return Check("planned vs measured", has_row and "n/a on CPU" in table,
                     f"{planned_text}; the page's row for rank 0 shows n/a for the peak on CPU")
    peak_gb = peak_reserved_gb_by_rank(job.series["memory"]).get(0)
    if peak_gb is None:
        return Check("planned vs measured", False, f"{planned_text}; no peak reserved reading")
    ratio = peak_gb * GB / planned.total
    low, high = PLAN_RATIO_BAND
    return Check("planned vs measured", has_row and low <= ratio <= high,
                 f"{planned_text}, peak reserved {format_size(peak_gb)}: "
                 f"measured / planned {ratio:.2f}")


def mfu_check(job: FinishedJob, *, on_gpu: bool) -> Check:
    """MFU in every step row: a fraction in (0, 1) on a GPU; null on a CPU, which has no
    peak FLOPs figure. Tokens/s is the median after the first step (its start-up)."""
    steps = rank_zero(job.series["train"])
    if not steps:
        return Check("mfu", False, "no step rows")
    mfus = [row.get("mfu") for row in steps]
    speed = median_after_first(steps, "tokens_per_second")
    speed_text = f"{speed:,.0f} tokens/s" if speed is not None else "no tokens/s"
    if not on_gpu:
        return Check("mfu", all(value is None for value in mfus),
                     f"null in all {len(steps)} step rows; {speed_text}")
    passed = all(isinstance(value, (int, float)) and 0 < value < 1 for value in mfus)
    mfu = median_after_first(steps, "mfu")
    mfu_6n = median_after_first(steps, "mfu_6n")
    return Check("mfu", passed, f"median {percent(mfu)} (6N {percent(mfu_6n)}) over "
                                f"{len(steps)} step rows; {speed_text}")


def merged_folder_check(run: RunFolder) -> Check:
    """The merged folder loads with plain transformers (on the CPU: this process holds no
    GPU memory beside the job's) and greedily generates NEW_TOKENS tokens."""
    merged = run.merged_dir
    if not merged.is_dir():
        return Check("merged folder", False, f"no {merged.name}/ in the run folder")
    size = sum(path.stat().st_size for path in merged.rglob("*") if path.is_file())
    started = time.monotonic()
    try:
        dtype, generated = generate_from(merged)
    except Exception as error:  # any failure to load or generate is this check's finding
        return Check("merged folder", False, f"{format_size(size / GB)}; does not load: {error!r}")
    return Check("merged folder", generated == NEW_TOKENS,
                 f"{format_size(size / GB)}, {dtype}; loaded and generated {generated} tokens in "
                 f"{time.monotonic() - started:.1f} s")


def generate_from(folder: Path) -> tuple[str, int]:
    """(the loaded weights' dtype, how many new tokens a greedy generation gave)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompt = tokenizer("What is 12 + 7?", return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return str(model.dtype).removeprefix("torch."), output.shape[-1] - prompt["input_ids"].shape[-1]


def sampled_gpu_indices(cuda_visible_devices: str | None) -> set[int]:
    """The indices the worker's sampler stores the job's GPUs under (worker/sampler.py): a
    CUDA index as it is, a GPU-/MIG- UUID by its position in the list."""
    ids = visible_gpu_ids(cuda_visible_devices) or []
    return {gpu_id if isinstance(gpu_id, int) else position for position, gpu_id in enumerate(ids)}


def launch_environment(run: RunFolder) -> dict[str, str]:
    """The environment the worker launched the ranks with (launch.json)."""
    try:
        return json.loads(run.launch_file.read_text())["env"]
    except (OSError, ValueError, KeyError):
        return {}


def rank_zero(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row.get("rank", 0) == 0]


def median_after_first(steps: list[dict[str, Any]], field: str) -> float | None:
    values = [row[field] for row in steps[1:] or steps if row.get(field) is not None]
    return statistics.median(values) if values else None


def mib_text(mib: float | None) -> str:
    """A figure the product stores in MiB, in the page's units (GB, MB)."""
    return format_size((mib or 0) * MIB / GB)


def percent(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "n/a"


def all_checks(job: FinishedJob, *, on_gpu: bool) -> list[Check]:
    return [job_check(job), device_samples_check(job, on_gpu=on_gpu),
            memory_events_check(job, on_gpu=on_gpu), planned_memory_check(job, on_gpu=on_gpu),
            mfu_check(job, on_gpu=on_gpu), merged_folder_check(job.run)]
