"""The job page's handlers: a job id (or nothing) in, plain data out."""
from __future__ import annotations

import html
import json
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
from pydantic import ValidationError

from app.auth.job_access import visible_job
from app.auth.principal import Principal
from app.ui.figure_text import format_number, format_time, step_progress
from app.ui.job_ids import parse_job_id
from app.ui.job_page.job_actions import checkpoints_frame, is_resumable
from app.ui.job_page.live_charts import LiveCharts, live_charts
from app.ui.job_page.planned_memory import memory_comparison_markdown
from app.ui.line_chart import Axes, Line, chart_html, frame_lines
from app.views.artifacts import ARTIFACT_KINDS, artifact_summary, summary_text
from app.views.failure import FailureView, failure_view
from app.views.jobs import job_config, job_run_folder, read_job_log_tail
from tunedeck import job_store
from tunedeck.db.models import Job
from tunedeck.job_spec import JobSpec
from tunedeck.job_states import CANCELLED, FAILED, FINISHED_STATUSES, QUEUED, RUNNING, SUCCEEDED
from tunedeck.metrics.figures import EVAL_LOSS, LOSS, TOKENS_PER_SECOND
from tunedeck.metrics.series import read_job_series

LOG_TAIL_LINES = 200
EVENT_COLUMNS = ["time", "kind", "message"]
LOSS_COLUMNS = ["step", LOSS.field, "series"]
TRAIN_SERIES, EVAL_SERIES = "train", "eval"
TOKENS_SERIES = "tokens/s"
THROUGHPUT_COLUMNS = ["step", TOKENS_PER_SECOND.field, "series"]
# A chart is about 650 px wide at 1440 px: more points than every other pixel only cost the browser
# its redraw each second, and a week-long job must not ship 10^5 points a tick.
MAX_POINTS_PER_LINE = 400
CHART_HEIGHT = 240  # the plot area, CSS pixels
NO_JOB_HEADLINE = "Pick a job: type its id, or click it in the Jobs tab."


@dataclass(frozen=True)
class JobPage:
    """Everything the job page shows, for one job (or the empty page when status is None)."""

    job_id: int | None
    status: str | None
    headline: str
    error: str | None = None
    loss: pd.DataFrame = field(default_factory=lambda: loss_frame([]))
    throughput: pd.DataFrame = field(default_factory=lambda: throughput_frame([]))
    log_tail: str = ""
    log_link_html: str = ""  # the whole log, once there is one
    events: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EVENT_COLUMNS))
    config_json: str = ""
    command_line: str = ""
    downloads_html: str = ""
    checkpoints: pd.DataFrame = field(default_factory=lambda: checkpoints_frame(None))
    memory_comparison: str = ""
    resume_hint: str = ""
    log_scale: bool = False  # the loss chart's axis
    failure: FailureView = field(default_factory=FailureView)
    live: LiveCharts = field(default_factory=LiveCharts)

    @property
    def finished(self) -> bool:
        return self.status is None or self.status in FINISHED_STATUSES

    def charts_shown(self, frame: pd.DataFrame) -> bool:
        """Whether a chart of `frame` is worth its space: while the job may still report,
        or once it has a point."""
        return not self.finished or not frame.dropna().empty

    @property
    def cancellable(self) -> bool:
        return self.status in (QUEUED, RUNNING)

    @property
    def resumable(self) -> bool:
        return is_resumable(self.status, self.checkpoints)


@dataclass(frozen=True)
class ChartView:
    """How the page draws the step charts: EMA smoothing of loss and throughput (0: none;
    the raw line stays, faint, behind the smoothed one) and the loss on a log scale."""

    smoothing: float = 0.6  # W&B's and TensorBoard's default weight
    log_scale: bool = False

    @classmethod
    def of(cls, smoothing: Any = None, log_scale: Any = None) -> "ChartView":
        try:
            weight = min(max(float(smoothing), 0.0), MAX_SMOOTHING)
        except (TypeError, ValueError):
            weight = cls.smoothing
        return cls(weight, bool(log_scale))


MAX_SMOOTHING = 0.99
RAW_SUFFIX = " (raw)"
# The smoothed line in the series' colour, its raw points faint behind it, eval apart.
LINE_COLOURS = {TRAIN_SERIES: "#1f77b4", TRAIN_SERIES + RAW_SUFFIX: "#c6dbef",
                EVAL_SERIES: "#ff7f0e", EVAL_SERIES + RAW_SUFFIX: "#fdd0a2",
                TOKENS_SERIES: "#2ca02c", TOKENS_SERIES + RAW_SUFFIX: "#c7e9c0"}


def smoothed(values: list[float], weight: float) -> list[float]:
    """The exponential moving average TensorBoard and W&B draw, debiased so the first
    points are not pulled towards 0."""
    out, average = [], 0.0
    for count, value in enumerate(values, start=1):
        average = average * weight + (1 - weight) * value
        out.append(average / (1 - weight ** count))
    return out


def load_job_page(job_id: Any, *, database, principal: Principal,
                  view: ChartView = ChartView()) -> JobPage:
    job_id = parse_job_id(job_id)
    if job_id is None:
        return JobPage(None, None, NO_JOB_HEADLINE)
    with database.transaction() as session:
        try:
            job = visible_job(session=session, principal=principal, job_id=job_id)
        except job_store.JobNotFound:
            return JobPage(job_id, None, f"There is no job {job_id}.")
        metrics = read_job_series(session=session, job_id=job_id,  # downsampled for the charts
                                  max_points=MAX_POINTS_PER_LINE)
        events = job_store.list_job_events(session=session, job_id=job_id)
    train, evaluations = metrics["train"], metrics["eval"]
    spec = job.spec_model
    config_json, command_line = _config_texts(job)
    checkpoints = checkpoints_frame(job)
    log_lines = read_job_log_tail(job, LOG_TAIL_LINES)
    return JobPage(
        job_id=job.id, status=job.status,
        headline=_headline(job, spec, train[-1] if train else None,
                           evaluations[-1] if evaluations else None),
        error=job.error,
        loss=loss_frame(train, evaluations, with_eval=spec.has_eval, view=view),
        log_scale=view.log_scale,
        throughput=throughput_frame(train, view=view),
        log_tail="\n".join(log_lines),
        log_link_html=(f'<a href="/api/jobs/{job.id}/logs/full" download="job-{job.id}-torchrun.log" '
                       f'id="job-log-download">Download the full log</a>' if log_lines else ""),
        events=pd.DataFrame([[format_time(event.time), event.kind, event.message]
                             for event in events], columns=EVENT_COLUMNS),
        config_json=config_json, command_line=command_line, downloads_html=downloads_html(job),
        checkpoints=checkpoints,
        resume_hint=resume_hint(job.status, spec, checkpoints),
        memory_comparison=memory_comparison_markdown(spec, metrics),
        failure=failure_view(job),
        live=live_charts(spec=spec, series=metrics, status=job.status,
                         started_at=job.started_at, finished_at=job.finished_at),
    )


def _headline(job: Job, spec: JobSpec, latest_step: dict[str, Any] | None,
              latest_eval: dict[str, Any] | None = None) -> str:
    latest_step = latest_step or {}
    loss, eval_loss, throughput = LOSS.field, EVAL_LOSS.field, TOKENS_PER_SECOND.field
    figures = [f"step {step_progress(latest_step.get('step'), spec.max_steps)}"]
    if latest_step.get(loss) is not None:
        figures.append(f"loss {format_number(latest_step[loss], '{:.4f}')}")
    if latest_eval and latest_eval.get(eval_loss) is not None:
        figures.append(f"eval loss {format_number(latest_eval[eval_loss], '{:.4f}')} "
                       f"(step {latest_eval.get('step')})")
    if latest_step.get(throughput) is not None:
        figures.append(f"{format_number(latest_step[throughput], '{:,.0f}')} "
                       f"{TOKENS_PER_SECOND.unit}")
    cancel_note = " (cancel requested)" if job.cancel_requested and job.status == RUNNING else ""
    return (f"### Job {job.id} · {html.escape(job.name)}\n"
            f"{_what_ran(job, spec)}\n\n"
            f"**Status:** `{job.status}`{cancel_note} · " + " · ".join(figures))


def _what_ran(job: Job, spec: JobSpec) -> str:
    """Model, dataset, method on backend, GPUs, who submitted it and when: one line."""
    gpus = f"{spec.num_gpus} GPU(s)" + (f" x {spec.num_nodes} nodes" if spec.num_nodes > 1 else "")
    who = f"by {html.escape(job.owner)}" if job.owner else "with open access"
    return (f'<span id="job-what-ran">`{html.escape(spec.model)}` on '
            f"`{html.escape(spec.dataset)}` · {spec.method} on {spec.backend} · {gpus} · "
            f"submitted {who} at {format_time(job.created_at)} UTC</span>")


def resume_hint(status: str | None, spec: JobSpec | None, checkpoints: pd.DataFrame) -> str:
    """Why Resume is greyed out on a job that stopped, and what makes the next one resumable."""
    if status not in (FAILED, CANCELLED) or not checkpoints.empty or spec is None:
        return ""
    if spec.checkpoint_every_steps == 0:
        return ("Resume needs a checkpoint, and this job saved none: set **checkpoint every N "
                "steps** (`checkpoint_every_steps`) for a job you may want to resume.")
    return (f"Resume needs a checkpoint: this job saves one every {spec.checkpoint_every_steps} "
            "steps and stopped before its first.")


def _config_texts(job: Job) -> tuple[str, str]:
    try:
        config = job_config(job)
    except (ValidationError, OSError, ValueError, KeyError) as error:
        return "", f"(cannot show the config: {error})"
    return json.dumps(config["config"], indent=2), shlex.join(config["argv"])


def loss_frame(train: list[dict[str, Any]], evaluations: list[dict[str, Any]] = (), *,
               with_eval: bool = False, view: ChartView = ChartView(smoothing=0.0)) -> pd.DataFrame:
    """The training loss by step, smoothed as `view` says (its raw line kept as
    "train (raw)"), and the eval loss as it was measured, its own series: a point an eval.

    A series with no point yet is one empty (NaN) row, so the legend names it from the
    start (the eval points come only after `eval_every_steps` steps)."""
    rows = _with_smoothing({TRAIN_SERIES: _step_points(train, LOSS.field)}, view.smoothing)
    if with_eval or evaluations:
        rows += _with_smoothing({EVAL_SERIES: _step_points(evaluations, EVAL_LOSS.field)}, 0.0)
    return _typed_frame(rows, LOSS_COLUMNS)


def throughput_frame(train: list[dict[str, Any]], *,
                     view: ChartView = ChartView(smoothing=0.0)) -> pd.DataFrame:
    lines = {TOKENS_SERIES: _step_points(train, TOKENS_PER_SECOND.field)}
    return _typed_frame(_with_smoothing(lines, view.smoothing), THROUGHPUT_COLUMNS)


LOSS_AXES = Axes("Loss (train and eval)", x_title="step", y_title="loss",
                 height=CHART_HEIGHT)
THROUGHPUT_AXES = Axes("Throughput", x_title="step", y_title=TOKENS_PER_SECOND.unit,
                       height=CHART_HEIGHT)


def loss_chart_html(frame: pd.DataFrame, *, log_scale: bool = False) -> str:
    """The loss chart: the smoothed line over its faint raw one, eval losses as points."""
    return chart_html(_step_lines(frame, LOSS.field),
                      replace(LOSS_AXES, log_y=log_scale))


def throughput_chart_html(frame: pd.DataFrame) -> str:
    return chart_html(_step_lines(frame, TOKENS_PER_SECOND.field), THROUGHPUT_AXES)


def _step_lines(frame: pd.DataFrame, field_name: str) -> list[Line]:
    kinds = {name: ("faint" if name.endswith(RAW_SUFFIX) else
                    "points" if name == EVAL_SERIES else "line")
             for name in frame["series"].dropna().unique()}
    return frame_lines(frame, x="step", y=field_name, series="series", colours=LINE_COLOURS,
                       kinds=kinds)


def _with_smoothing(lines: dict[str, list[tuple[int, float]]],
                    weight: float) -> list[tuple[Any, Any, str]]:
    """(step, value, series) rows: each line smoothed, and its raw points as "NAME (raw)",
    drawn first so the smoothed line lies on top; unsmoothed lines as they are."""
    rows: list[tuple[Any, Any, str]] = []
    for name, points in lines.items():
        points = thin_points(points)
        if weight > 0:
            rows += [(step, value, name + RAW_SUFFIX) for step, value in points] \
                or [(None, None, name + RAW_SUFFIX)]
            points = list(zip([step for step, _ in points],
                              smoothed([value for _, value in points], weight)))
        rows += [(step, value, name) for step, value in points] or [(None, None, name)]
    return rows


def _step_points(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(row["step"], row[key]) for row in rows
            if row.get("step") is not None and row.get(key) is not None]


def thin_points(points: list, limit: int = MAX_POINTS_PER_LINE) -> list:
    """At most about `limit` evenly spaced points, always keeping the newest."""
    if len(points) <= limit:
        return points
    stride = -(-len(points) // limit)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def _typed_frame(points: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Numbers stay numbers even with no rows: an empty object column would make the plot
    treat its axis as categories, and the chart keeps that scale once drawn."""
    frame = pd.DataFrame(points, columns=columns)
    return frame.astype({column: ("string" if column in ("rank", "series") else "float64")
                         for column in columns})


def downloads_html(job: Job) -> str:
    """Links to the artifacts a succeeded job left, each with its dtype and size (e.g.
    "BF16, 1.2 GB (9 files)"); empty for any other job."""
    run = job_run_folder(job)
    if job.status != SUCCEEDED or run is None:
        return ""
    summaries = {kind: artifact_summary(run, kind) for kind in ARTIFACT_KINDS}
    links = [f'<a href="/api/jobs/{job.id}/artifacts/{kind}" download="job-{job.id}-{kind}.zip" '
             f'id="job-download-{kind}">Download {_ARTIFACT_TITLES[kind]} (zip)</a> '
             f'<span id="job-download-{kind}-size">{html.escape(summary_text(summary))}</span>'
             for kind, summary in summaries.items() if summary is not None]
    if not links:
        return "<p>This job left no merged weights or adapter.</p>"
    return "<p>" + " &nbsp;·&nbsp; ".join(links) + "</p>"


_ARTIFACT_TITLES = {"merged": "merged weights", "adapter": "LoRA adapter"}


def error_html(error: str | None) -> str:
    if not error:
        return ""
    return ('<div style="border:2px solid #dc2626;background:#fef2f2;color:#7f1d1d;'
            'padding:12px 16px;border-radius:8px"><strong>This job failed</strong>'
            f'<pre style="white-space:pre-wrap;margin:8px 0 0">{html.escape(error)}</pre></div>')
