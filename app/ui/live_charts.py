"""The job page's live signals: memory per GPU over time (with the card's capacity and the
planner's predicted peak as reference lines), per-rank RSS on CPU hosts, learning rate,
grad norm, step time, MFU, and the progress line with its ETA.

Frames are built from the already downsampled series of `tunedeck.metrics.series`; the
handlers here take plain values, and tests call them directly.
"""
from __future__ import annotations

import html
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from tunedeck.metrics.downsample import DEFAULT_MAX_POINTS
from tunedeck.job_spec import JobSpec
from tunedeck.planner.memory_plan import GpuSet, plan_strategies, spec_strategy
from tunedeck.planner.shape_source import resolve_model_shape

LIVE_CHART_POINTS = DEFAULT_MAX_POINTS
SAMPLED_MEMORY_COLUMNS = ["seconds", "memory_mb", "series"]
CAPACITY_SERIES, PLANNED_SERIES = "card capacity", "planned peak"
BYTES_PER_MB = 1024 * 1024  # MiB, as the samples and the ranks' readings
DEFAULT_CARD_GB = 80.0
ETA_RECENT_STEPS = 20  # the median of these many recent steps: robust to one slow eval step


@dataclass(frozen=True)
class LiveCharts:
    sampled_memory: pd.DataFrame = field(default_factory=lambda: _frame([], SAMPLED_MEMORY_COLUMNS))
    sampled_memory_title: str = "Memory per GPU"
    learning_rate: pd.DataFrame = field(default_factory=lambda: step_frame([], "learning_rate"))
    grad_norm: pd.DataFrame = field(default_factory=lambda: step_frame([], "grad_norm"))
    step_time: pd.DataFrame = field(default_factory=lambda: step_frame([], "step_seconds"))
    mfu: pd.DataFrame = field(default_factory=lambda: step_frame([], "mfu"))
    progress_html: str = ""

    @property
    def has_mfu(self) -> bool:
        return not self.mfu.empty


def live_charts(*, spec_data: dict[str, Any], series: dict[str, list[dict[str, Any]]],
                status: str, started_at: datetime | None, finished_at: datetime | None,
                now: datetime | None = None) -> LiveCharts:
    train = series.get("train") or []
    gpus = series.get("gpus") or []
    if gpus:
        memory, title = gpu_memory_frame(gpus, planned_peak_mb(spec_data, gpus)), "Memory per GPU (NVML)"
    else:
        memory = rank_rss_frame(series.get("processes") or [], world_size=_world_size(spec_data))
        title = "Memory per rank process (RSS, sampled by the worker)"
    return LiveCharts(
        sampled_memory=memory, sampled_memory_title=title,
        learning_rate=step_frame(train, "learning_rate"), grad_norm=step_frame(train, "grad_norm"),
        step_time=step_frame(train, "step_seconds"), mfu=step_frame(train, "mfu"),
        progress_html=progress_html(train, max_steps=spec_data.get("max_steps"), status=status,
                                    started_at=started_at, finished_at=finished_at, now=now),
    )


def step_frame(train: list[dict[str, Any]], key: str) -> pd.DataFrame:
    points = [(row["step"], row[key]) for row in train
              if row.get("step") is not None and row.get(key) is not None]
    return _frame(points, ["step", key])


def gpu_memory_frame(gpus: list[dict[str, Any]], planned_mb: float | None) -> pd.DataFrame:
    """One line a GPU (used MB over seconds since the first sample), the largest card's
    capacity, and the planner's predicted peak, each reference drawn across the whole run."""
    start = min(row["time"] for row in gpus)
    end = max(row["time"] for row in gpus)
    several_hosts = len({row["host"] for row in gpus}) > 1
    rows = [(row["time"] - start, row["used_mb"], _gpu_name(row, several_hosts))
            for row in gpus if row.get("used_mb") is not None]
    capacity = max((row["total_mb"] for row in gpus if row.get("total_mb")), default=None)
    for name, level in ((CAPACITY_SERIES, capacity), (PLANNED_SERIES, planned_mb)):
        if level is not None:
            rows += [(0.0, level, name), (end - start, level, name)]
    return _frame(rows, SAMPLED_MEMORY_COLUMNS)


def rank_rss_frame(processes: list[dict[str, Any]], *, world_size: int = 0) -> pd.DataFrame:
    """One line a rank: its process's RSS, as the worker sampled it.

    A rank of the job with no reading yet is one empty (NaN) row, as in
    `job_handlers.memory_frame`: the chart picks its colours and legend from the series in
    its first data and keeps them, so a page opened before the first sample would otherwise
    draw every rank's line without a colour and with no legend. Plots skip the NaN rows.
    """
    readings = [row for row in processes if row.get("rss_mb") is not None]
    start = min((row["time"] for row in readings), default=0.0)
    rows = [(row["time"] - start, row["rss_mb"], f"rank {row['rank']}") for row in readings]
    sampled = {row["rank"] for row in readings}
    rows += [(None, None, f"rank {rank}") for rank in range(world_size) if rank not in sampled]
    return _frame(rows, SAMPLED_MEMORY_COLUMNS)


def _world_size(spec_data: dict[str, Any]) -> int:
    return int(spec_data.get("num_gpus") or 1) * int(spec_data.get("num_nodes") or 1)


def _gpu_name(row: dict[str, Any], with_host: bool) -> str:
    return f"{row['host']} GPU {row['gpu']}" if with_host else f"GPU {row['gpu']}"


def planned_peak_mb(spec_data: dict[str, Any], gpus: list[dict[str, Any]]) -> float | None:
    """The memory planner's total per GPU for the job's strategy, or None when the model's
    shape is not known here (a folder only the worker's host can see)."""
    capacity_mb = max((row["total_mb"] for row in gpus if row.get("total_mb")), default=None)
    card_gb = capacity_mb * BYTES_PER_MB / 10**9 if capacity_mb else DEFAULT_CARD_GB
    try:
        spec = JobSpec.model_validate(spec_data)
        plans = plan_strategies(spec, GpuSet(spec.num_gpus, card_gb, spec.num_nodes),
                                resolve_model_shape(spec.model))
        return plans[spec_strategy(spec)].breakdown.total / BYTES_PER_MB
    except (ValueError, KeyError):
        return None


def progress_html(train: list[dict[str, Any]], *, max_steps: int | None, status: str,
                  started_at: datetime | None, finished_at: datetime | None,
                  now: datetime | None = None) -> str:
    """Steps done of the total as a bar, the time elapsed, and (while running) the ETA:
    the median step time of the recent steps times the steps left."""
    if status is None:
        return ""
    done = train[-1]["step"] if train else 0
    figures = [f"step {done:,} / {max_steps:,}" if max_steps else f"step {done:,}"]
    elapsed = _elapsed_seconds(started_at, finished_at, now)
    if elapsed is not None:
        figures.append(f"elapsed {format_duration(elapsed)}")
    eta = eta_seconds(train, max_steps) if status == "running" else None
    if eta is not None:
        figures.append(f"ETA {format_duration(eta)}")
    bar = (f'<progress value="{done}" max="{max_steps}" style="width:100%"></progress>'
           if max_steps else "")
    return f'<div id="job-progress-figures">{bar}<div>{html.escape(" · ".join(figures))}</div></div>'


def eta_seconds(train: list[dict[str, Any]], max_steps: int | None) -> float | None:
    if not train or not max_steps:
        return None
    recent = [row["step_seconds"] for row in train[-ETA_RECENT_STEPS:]
              if row.get("step_seconds") is not None]
    if not recent:
        return None
    return statistics.median(recent) * max(0, max_steps - train[-1]["step"])


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def _elapsed_seconds(started_at: datetime | None, finished_at: datetime | None,
                     now: datetime | None) -> float | None:
    if started_at is None:
        return None
    end = finished_at or now or datetime.now(timezone.utc)
    return max(0.0, (_as_utc(end) - _as_utc(started_at)).total_seconds())


def _as_utc(moment: datetime) -> datetime:
    # SQLite hands back naive datetimes; the store writes UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _frame(points: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Numeric columns stay numeric even when empty (see job_handlers._typed_frame)."""
    frame = pd.DataFrame(points, columns=columns)
    return frame.astype({column: ("string" if column == "series" else "float64")
                         for column in columns})
