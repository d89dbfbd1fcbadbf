"""The job page's live signals: memory per GPU over time (with the card's capacity and the
planner's predicted peak as reference lines), per-rank RSS on CPU hosts, learning rate,
grad norm, step time, MFU, a preference job's rewards, reward margin, preference accuracy
and log-probs (smoothed as the loss), and the progress line with its ETA.

Frames are built from the already downsampled series of `tunedeck.metrics.series`; the
handlers here take plain values, and tests call them directly.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from app.ui.charts.line_chart import typed_frame
from app.ui.job_page.step_charts import ChartView, figure_chart_frame
from tunedeck.db.models import as_utc
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import events as metrics_event
from tunedeck.metrics.downsample import DEFAULT_MAX_POINTS
from tunedeck.metrics.eta import eta_seconds, format_duration
from tunedeck.metrics.figures import (GPU_USED_MB, GRAD_NORM, LEARNING_RATE, LIVE_STEP_FIGURES, MFU,
                                      OBJECTIVE_CHARTS, PROCESS_RSS_MB, STEP_SECONDS,
                                      FigureChart)
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import spec_plan
from tunedeck.planner.shape_source import resolve_model_shape
from tunedeck.units import GB, MIB

LIVE_CHART_POINTS = DEFAULT_MAX_POINTS
SAMPLED_MEMORY_COLUMNS = ["seconds", "memory_mb", "series"]
CAPACITY_SERIES, PLANNED_SERIES = "card capacity", "planned peak"
DEFAULT_CARD_GB = 80.0


def step_frames(train: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """One frame by step a figure of the live panel (`LIVE_STEP_FIGURES`), by its field."""
    return {figure.field: step_frame(train, figure.field) for figure in LIVE_STEP_FIGURES}


def preference_frames(train: list[dict[str, Any]], *,
                      view: ChartView = ChartView(smoothing=0.0)) -> dict[str, pd.DataFrame]:
    """One frame a preference chart (`OBJECTIVE_CHARTS`), by its name, its lines smoothed
    as `view` says."""
    return {chart.name: figure_chart_frame(train, chart, view=view) for chart in OBJECTIVE_CHARTS}


@dataclass(frozen=True)
class LiveCharts:
    sampled_memory: pd.DataFrame = field(
        default_factory=lambda: typed_frame([], SAMPLED_MEMORY_COLUMNS))
    sampled_memory_title: str = GPU_USED_MB.title
    step_charts: dict[str, pd.DataFrame] = field(default_factory=lambda: step_frames([]))
    progress_html: str = ""
    # A preference (DPO) or RL (GRPO) job's charts, by name; an SFT job's have no point.
    preference: dict[str, pd.DataFrame] = field(default_factory=lambda: preference_frames([]))
    # A GRPO job's newest kept rollouts (metric_store.read_rollouts), newest first.
    rollouts: list[dict[str, Any]] = field(default_factory=list)

    # The live panel's plots, by name (app/ui/job_page/live_panel.py).
    @property
    def learning_rate(self) -> pd.DataFrame:
        return self.step_charts[LEARNING_RATE.field]

    @property
    def grad_norm(self) -> pd.DataFrame:
        return self.step_charts[GRAD_NORM.field]

    @property
    def step_time(self) -> pd.DataFrame:
        return self.step_charts[STEP_SECONDS.field]

    @property
    def mfu(self) -> pd.DataFrame:
        return self.step_charts[MFU.field]

    @property
    def has_mfu(self) -> bool:
        return not self.mfu.empty

    def has_chart(self, chart: FigureChart) -> bool:
        """Whether the job's steps carry a figure of `chart` (only a preference job's do):
        its chart is drawn only then, as MFU's."""
        return not self.preference[chart.name].dropna().empty


def live_charts(*, spec: JobSpec, series: dict[str, list[dict[str, Any]]],
                status: str, started_at: datetime | None, finished_at: datetime | None,
                now: datetime | None = None,
                view: ChartView = ChartView(smoothing=0.0)) -> LiveCharts:
    """`view`: the smoothing of the preference charts (the loss chart's)."""
    train = series.get("train") or []
    gpus = series.get("gpus") or []
    # One memory chart, for the kind of device the job ran on, from the job's start: a line
    # a GPU (NVML) with its capacity and the planned peak, or on a CPU host a line a rank.
    origin = as_utc(started_at).timestamp() if started_at is not None else None
    if gpus:
        memory = gpu_memory_frame(gpus, planned_peak_mb(spec, gpus), origin=origin)
        title = f"{GPU_USED_MB.title} (NVML)"
    elif not series.get("processes") and _gpu_ranks(series.get("memory") or []):
        # GPU ranks nobody sampled (a Slurm job: the executor is not on the nodes): their
        # own CUDA allocator readings, a line a rank.
        memory = rank_rss_frame(series["memory"], world_size=spec.world_size, origin=origin,
                                field=RESERVED_MB)
        title = RANK_RESERVED_TITLE
    else:
        # The worker's samples; a job run before the worker sampled has the ranks' own. The
        # worker samples once a second, so a job of a few seconds has one reading a rank (a
        # dot on an axis a tenth of a second wide): then the ranks' own, one a step, say more.
        sampled = series.get("processes") or []
        own = _rank_rss_readings(series.get("memory") or [])
        processes = own if len(sampled) <= spec.world_size and len(own) > len(sampled) \
            else sampled
        memory = rank_rss_frame(processes, world_size=spec.world_size, origin=origin)
        title = PROCESS_RSS_MB.title
    return LiveCharts(
        sampled_memory=memory, sampled_memory_title=title, step_charts=step_frames(train),
        progress_html=progress_html(train, max_steps=spec.max_steps, status=status,
                                    started_at=started_at, finished_at=finished_at, now=now,
                                    phase=next(iter(series.get("phase") or []), None)),
        preference=preference_frames(train, view=view),
        rollouts=series.get("rollouts") or [],
    )


def step_frame(train: list[dict[str, Any]], key: str) -> pd.DataFrame:
    points = [(row["step"], row[key]) for row in train
              if row.get("step") is not None and row.get(key) is not None]
    return typed_frame(points, ["step", key])


def gpu_memory_frame(gpus: list[dict[str, Any]], planned_mb: float | None, *,
                     origin: float | None = None) -> pd.DataFrame:
    """One line a GPU (used MB over seconds since `origin`, the job's start, else the first
    sample), the largest card's capacity, and the planner's predicted peak, each reference
    drawn across the whole run."""
    start = origin if origin is not None else min(row["time"] for row in gpus)
    end = max(row["time"] for row in gpus)
    several_hosts = len({row["host"] for row in gpus}) > 1
    used = GPU_USED_MB.field
    # The legend lists series as they first appear: GPUs in host and index order.
    ordered = sorted((row for row in gpus if row.get(used) is not None),
                     key=lambda row: (row["host"], row["gpu"], row["time"]))
    rows = [(row["time"] - start, row[used], _gpu_name(row, several_hosts)) for row in ordered]
    capacity = max((row["total_mb"] for row in gpus if row.get("total_mb")), default=None)
    for name, level in ((CAPACITY_SERIES, capacity), (PLANNED_SERIES, planned_mb)):
        if level is not None:
            rows += [(0.0, level, name), (max(0.0, end - start), level, name)]
    return typed_frame(rows, SAMPLED_MEMORY_COLUMNS)


def rank_rss_frame(processes: list[dict[str, Any]], *, world_size: int = 0,
                   origin: float | None = None, field: str = PROCESS_RSS_MB.field) -> pd.DataFrame:
    """One line a rank: its process's RSS over seconds since `origin` (the job's start, else
    the first reading), as the worker sampled it.

    A rank of the job with no reading yet is one empty (NaN) row, as in
    `step_charts.loss_frame`: the chart picks its colours and legend from the series in
    its first data and keeps them, so a page opened before the first sample would otherwise
    draw every rank's line without a colour and with no legend. Plots skip the NaN rows.
    """
    rss = field  # `reserved_mb`: the ranks' own CUDA readings instead
    readings = [row for row in processes if row.get(rss) is not None]
    start = origin if origin is not None else min((row["time"] for row in readings), default=0.0)
    sampled = {row["rank"] for row in readings}
    keyed = [(row["rank"], row["time"] - start, row[rss]) for row in readings]
    keyed += [(rank, None, None) for rank in range(world_size) if rank not in sampled]
    # Rank order, not arrival order: the legend lists series as they first appear, and
    # rank 1's sample often lands before rank 0's.
    keyed.sort(key=lambda item: (item[0], item[1] is not None, item[1] or 0.0))
    rows = [(seconds, mb, f"rank {rank}") for rank, seconds, mb in keyed]
    return typed_frame(rows, SAMPLED_MEMORY_COLUMNS)


RESERVED_MB = "reserved_mb"
RANK_RESERVED_TITLE = "GPU memory per rank (CUDA allocator, reserved)"


def _gpu_ranks(memory: list[dict[str, Any]]) -> bool:
    return any(row.get(RESERVED_MB) is not None for row in memory)


def _rank_rss_readings(memory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks' own memory lines as RSS readings of `rank_rss_frame`."""
    rss = PROCESS_RSS_MB.field
    return [{"time": row["time"], "rank": row["rank"], rss: row.get(rss)} for row in memory
            if row.get(rss) is not None]


def _gpu_name(row: dict[str, Any], with_host: bool) -> str:
    return f"{row['host']} GPU {row['gpu']}" if with_host else f"GPU {row['gpu']}"


def planned_peak_mb(spec: JobSpec, gpus: list[dict[str, Any]]) -> float | None:
    """The memory planner's total per GPU (in MiB, as the samples) for the job's strategy,
    or None when the model's shape is not known here (a folder only the worker's host can
    see)."""
    capacity_mb = max((row["total_mb"] for row in gpus if row.get("total_mb")), default=None)
    card_gb = capacity_mb * MIB / GB if capacity_mb else DEFAULT_CARD_GB
    try:
        return spec_plan(spec, GpuSet(spec.num_gpus, card_gb, spec.num_nodes),
                         resolve_model_shape(spec.model)).breakdown.total / MIB
    except (ValueError, KeyError):
        return None


def progress_html(train: list[dict[str, Any]], *, max_steps: int | None, status: str,
                  started_at: datetime | None, finished_at: datetime | None,
                  now: datetime | None = None, phase: dict[str, Any] | None = None) -> str:
    """Steps done of the total as a bar, the time elapsed, and (while running) the ETA:
    the mean time a recent step took times the steps left. Running before step 1, the
    newest `phase` line instead: a download, the weights, records, with its own bar."""
    if status is None:
        return ""
    if status == "running" and not train and phase is not None:
        return phase_progress_html(phase)
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
    return (f'<div id="job-progress-figures">{bar}'
            f'<div>{html.escape(" · ".join(figures))}</div></div>')


def phase_progress_html(phase: dict[str, Any]) -> str:
    """"downloading model.safetensors · 1.20 GB / 3.40 GB · 12 s" over a bar of done of
    total (none for a phase with nothing to count)."""
    done, total = phase.get("done"), phase.get("total")
    bar = (f'<progress value="{done}" max="{total}" style="width:100%"></progress>'
           if isinstance(done, (int, float)) and total else "")
    return (f'<div id="job-progress-figures" data-phase="{html.escape(str(phase.get("phase")))}">'
            f'{bar}<div>{html.escape(metrics_event.phase_text(phase))}</div></div>')


def _elapsed_seconds(started_at: datetime | None, finished_at: datetime | None,
                     now: datetime | None) -> float | None:
    if started_at is None:
        return None
    end = finished_at or now or datetime.now(timezone.utc)
    return max(0.0, (as_utc(end) - as_utc(started_at)).total_seconds())
