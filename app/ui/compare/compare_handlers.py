"""The Compare tab's handlers: plain values in, plain values (frames, text) out. The numbers
come from app.views.job_compare, as the API's do."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from app.actions.errors import NotFound
from app.actions.job_lookup import find_visible_job
from app.auth.job_access import visible_jobs
from app.auth.principal import Principal
from app.ui.charts.line_chart import typed_frame
from app.views.job_compare import BadJobIds, compare_jobs, parse_job_ids
from tunedeck.jobs import queries as job_queries
from tunedeck.spec.job_spec import JobSpec
from tunedeck.jobs.states import FINISHED_STATUSES
from tunedeck.metrics.eta import format_duration
from tunedeck.metrics.figures import OBJECTIVE_CHARTS, FigureChart

LOSS_COLUMNS = ["step", "loss", "job"]
THROUGHPUT_COLUMNS = ["step", "tokens_per_second", "job"]
MEMORY_COLUMNS = ["seconds", "memory_mb", "job"]
PREFERENCE_COLUMNS = ["step", "value", "job"]  # a preference chart's (FigureChart's) lines
DIFF_COLUMNS = ["field"]
COMPARE_CHART_POINTS = 1000  # per line; several jobs share one chart
NO_COMPARISON = ("Pick two or more jobs in **Jobs to compare** (or type their ids, e.g. "
                 "`3, 5, 8`): their loss, throughput and memory are overlaid, one colour a job, "
                 "with their figures and the spec fields that differ side by side.")
SUMMARY_COLUMNS = ["figure"]
# One colour a job on every chart (Vega's category10); a job's eval line and ranks take it.
JOB_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"]
# An eval line (and a rejected answers' one) is its job's colour, this much lighter.
EVAL_TINT = 0.45
TINTED_LINES = (" eval", " rejected")
# And one dash pattern a job (the first solid): two jobs whose curves coincide still show
# both, the dashed one's gaps letting the other's colour through.
JOB_DASHES = ["none", "9 5", "3 4", "12 4 3 4"]


def compare_elem_id(chart: FigureChart) -> str:
    """The Compare tab's chart of a preference figure: "compare-rewards-plot", ..."""
    return f"compare-{chart.name.replace('_', '-')}-plot"


COMPARE_CHARTS = ("#compare-loss-plot", "#compare-throughput-plot", "#compare-memory-plot",
                  *(f"#{compare_elem_id(chart)}" for chart in OBJECTIVE_CHARTS))
FIGURE_ROWS = [("final loss", "final_loss", "{:.4f}"), ("best loss", "best_loss", "{:.4f}"),
               ("final eval loss", "final_eval_loss", "{:.4f}"),
               ("tokens/s (last 20 steps)", "tokens_per_second", "{:,.0f}"),
               ("peak memory (MB)", "peak_mb", "{:,.0f}"),
               # A preference job's (job_compare.RECENT_PREFERENCE_FIGURES); rows of None
               # for every job (SFT jobs) are left out.
               ("reward margin (last 20 steps)", "reward_margin", "{:.4f}"),
               ("preference accuracy (last 20 steps)", "reward_accuracy", "{:.1%}"),
               ("mean reward (last 20 steps)", "reward", "{:.4f}"),
               # Start-up apart: a one-time op build must not count against a backend.
               ("wall time from the first loss", "training_seconds", None),
               ("start-up (to the first loss)", "startup_seconds", None)]


@dataclass(frozen=True)
class Comparison:
    """What the Compare tab shows; `running` keeps its timer going."""

    message: str
    loss: pd.DataFrame = field(default_factory=lambda: _frame([], LOSS_COLUMNS))
    throughput: pd.DataFrame = field(default_factory=lambda: _frame([], THROUGHPUT_COLUMNS))
    memory: pd.DataFrame = field(default_factory=lambda: _frame([], MEMORY_COLUMNS))
    # A preference job's charts, by name (OBJECTIVE_CHARTS); drawn while `lines` has any.
    preference: dict[str, pd.DataFrame] = field(default_factory=lambda: {
        chart.name: _frame([], PREFERENCE_COLUMNS) for chart in OBJECTIVE_CHARTS})
    diff: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DIFF_COLUMNS))
    summary: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SUMMARY_COLUMNS))
    running: bool = False
    # Each chart's lines, by job, before they have points: {"loss" | "throughput" | "memory"
    # | a preference chart's name: names}; a preference chart has lines only for a
    # preference job.
    lines: dict[str, list[str]] = field(default_factory=dict)
    colours: dict[str, str] = field(default_factory=dict)  # every line's colour, by its name

    @property
    def shown(self) -> bool:
        return bool(self.lines)


def load_comparison(ids_text: str | None, *, database, principal: Principal) -> Comparison:
    if not (ids_text or "").strip():
        return Comparison(NO_COMPARISON)
    try:
        job_ids = parse_job_ids(ids_text)
        specs = _visible_specs(database, principal, job_ids)
        compared = compare_jobs(database=database, job_ids=job_ids,
                                max_points=COMPARE_CHART_POINTS)
    except (BadJobIds, NotFound, job_queries.JobNotFound) as problem:
        return Comparison(f"Cannot compare: {problem}.")
    labels = {job["id"]: job_label(job) for job in compared["jobs"]}
    series = compared["series"]
    lines = _every_line(labels, specs, series)
    loss = _frame([(row["step"], row["loss"], _loss_line(labels[row["job_id"]], row["kind"]))
                   for row in series["loss"]], LOSS_COLUMNS)
    return Comparison(
        message=_summary(compared["jobs"]) + identical_lines_note(loss, "loss"),
        loss=loss,
        throughput=_frame([(row["step"], row["tokens_per_second"], labels[row["job_id"]])
                           for row in series["tokens_per_second"]], THROUGHPUT_COLUMNS),
        memory=_frame([(row["seconds"], row["memory_mb"],
                        f"{labels[row['job_id']]} rank {row['rank']}")
                       for row in series["memory"]], MEMORY_COLUMNS),
        preference={chart.name: preference_frame(chart, series, labels)
                    for chart in OBJECTIVE_CHARTS},
        diff=diff_frame(compared["diff"], list(labels.values())),
        summary=summary_frame(compared["jobs"], list(labels.values())),
        running=any(job["status"] not in FINISHED_STATUSES for job in compared["jobs"]),
        lines=lines,
        colours=line_colours(labels, lines),
    )


def identical_lines(frame: pd.DataFrame, value_column: str) -> list[list[str]]:
    """Groups of two or more lines ("job" names) with the same points, step for step: drawn
    on one chart, the last one hides the others."""
    by_points: dict[tuple, list[str]] = {}
    for line, points in frame.dropna().groupby("job", sort=False):
        key = tuple(zip(points["step"].tolist(), points[value_column].tolist()))
        by_points.setdefault(key, []).append(str(line))
    return [names for names in by_points.values() if len(names) > 1]


def identical_lines_note(frame: pd.DataFrame, value_column: str) -> str:
    """A sentence for each group of identical lines, for the message above the charts."""
    return "".join(f"\n\n**Identical {value_column} curves:** {' and '.join(names)} have the "
                   f"same {value_column} at every step, so the chart draws them as one line "
                   f"(in {names[-1]}'s colour)." for names in identical_lines(frame, value_column))


def line_colours(labels: dict[int, str], lines: dict[str, list[str]]) -> dict[str, str]:
    """Each line's colour: its job's, wherever it is drawn (an eval line a lighter tint)."""
    colours: dict[str, str] = {}
    for index, label in enumerate(labels.values()):
        colour = JOB_COLOURS[index % len(JOB_COLOURS)]
        for line in {line for chart in lines.values() for line in chart}:
            if line == label or line.startswith(f"{label} "):
                colours[line] = _tint(colour) if line.endswith(TINTED_LINES) else colour
    return colours


def line_dash_css() -> str:
    """The page CSS that draws each job's lines on the Compare charts with its dash pattern.
    Vega draws a line as a path whose `stroke` is its colour from `line_colours`, so a
    job's colour (and its eval tint) selects its lines on every chart."""
    rules = []
    for index, colour in enumerate(JOB_COLOURS):
        dash = JOB_DASHES[index % len(JOB_DASHES)]
        selectors = ", ".join(f'{chart} g.mark-line path[stroke="{shade}"]'
                              for chart in COMPARE_CHARTS for shade in (colour, _tint(colour)))
        rules.append(f"{selectors} {{ stroke-dasharray: {dash}; }}")
    return "\n".join(rules) + "\n"


def _tint(colour: str) -> str:
    channels = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * EVAL_TINT):02x}" for c in channels)


def summary_frame(jobs: list[dict[str, Any]], labels: list[str]) -> pd.DataFrame:
    """One row a figure (final and best loss, eval loss, tokens/s, peak memory, wall time
    from the first loss and start-up apart), one column a job."""
    rows = []
    for title, key, pattern in FIGURE_ROWS:
        values = [job["figures"].get(key) for job in jobs]
        if all(value is None for value in values):
            continue  # e.g. no job has an eval set
        rows.append([title, *(_figure(value, pattern) for value in values)])
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS + labels)


def _figure(value: float | None, pattern: str | None) -> str:
    if value is None:
        return ""
    return pattern.format(value) if pattern else format_duration(value)


def _visible_specs(database, principal: Principal, job_ids: list[int]) -> dict[int, JobSpec]:
    """Each job's spec; NotFound for a job the principal may not see."""
    with database.transaction() as session:
        return {job_id: find_visible_job(session=session, principal=principal,
                                         job_id=job_id).spec_model for job_id in job_ids}


def _every_line(labels: dict[int, str], specs: dict[int, JobSpec],
                series: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    """The lines each chart draws once every job reports: a loss line a job (and its eval
    line when it has an eval set), a throughput line a job, a memory line a rank, and on
    each preference chart a line a figure of each preference job (objective dpo, or one
    whose steps carry the chart's figures)."""
    loss, memory = [], []
    for job_id, label in labels.items():
        loss.append(label)
        if specs[job_id].has_eval:
            loss.append(_loss_line(label, "eval"))
        memory += [f"{label} rank {rank}" for rank in range(specs[job_id].world_size)]
    lines = {"loss": loss, "throughput": list(labels.values()), "memory": memory}
    for chart in OBJECTIVE_CHARTS:
        reporting = {row["job_id"] for figure in chart.figures for row in series[figure.field]}
        lines[chart.name] = [_preference_line(chart, label, name)
                             for job_id, label in labels.items()
                             if _drawn_for(chart, specs[job_id]) or job_id in reporting
                             for name, _figure in chart.lines]
    return lines


def _drawn_for(chart: FigureChart, spec) -> bool:
    """Whether a job of this spec has the chart's lines before its steps report them."""
    return spec.objective == chart.objective and (not chart.reference_only
                                                  or spec.uses_reference_model)


def preference_frame(chart: FigureChart, series: dict[str, list[dict[str, Any]]],
                     labels: dict[int, str]) -> pd.DataFrame:
    """A preference chart's points, every job's: a line a job and figure ("job 3 (fsdp)
    chosen", "job 3 (fsdp) rejected"; a one-figure chart's line is the job's label), by
    step, not smoothed (as the loss here)."""
    return _frame([(row["step"], row[figure.field],
                    _preference_line(chart, labels[row["job_id"]], name))
                   for name, figure in chart.lines for row in series[figure.field]],
                  PREFERENCE_COLUMNS)


def _preference_line(chart: FigureChart, label: str, name: str) -> str:
    return label if len(chart.lines) == 1 else f"{label} {name}"


def pickable_jobs(*, database, principal: Principal, limit: int = 100) -> list[tuple[str, int]]:
    """The jobs the principal may compare, newest first, as (label, id) for a picker."""
    with database.transaction() as session:
        jobs = visible_jobs(session=session, principal=principal, limit=limit)
        return [(f"{job.id} · {job.name} · {job.status}", job.id) for job in jobs]


def job_label(job: dict[str, Any]) -> str:
    """"job 3 (zero2)", "job 4 (dpo · zero2)": an SFT and a DPO job never share a label."""
    objective = job.get("objective") or "sft"
    backend = job.get("backend") or "?"
    return f"job {job['id']} ({backend if objective == 'sft' else f'{objective} · {backend}'})"


def _loss_line(label: str, kind: str) -> str:
    return label if kind == "train" else f"{label} eval"


def _summary(jobs: list[dict[str, Any]]) -> str:
    return "Comparing " + " · ".join(f"**job {job['id']}** {job['name']} `{job['status']}`"
                                     for job in jobs)


def diff_frame(diff: list[dict[str, Any]], labels: list[str]) -> pd.DataFrame:
    """One row a differing field, one column a job."""
    rows = [[entry["field"], *(_cell(value) for value in entry["values"])] for entry in diff]
    return pd.DataFrame(rows, columns=DIFF_COLUMNS + labels)


def with_every_line(frame: pd.DataFrame, lines: list[str]) -> pd.DataFrame:
    """The frame after one empty (NaN) row for each line the chart will draw, in job order.

    Why: the chart fixes its colours and legend from the lines in the data it is first drawn
    with (as `job_handlers.memory_frame` says), so a job that reports only later (queued
    behind another) would be drawn without a colour and left out of the legend. The rows
    also keep each job's colour stable. Plots skip the NaN rows."""
    if not lines:
        return frame
    placeholders = _frame([(None, None, line) for line in lines], list(frame.columns))
    return pd.concat([placeholders, frame], ignore_index=True) if len(frame) else placeholders


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _frame(points: list[tuple], columns: list[str]) -> pd.DataFrame:
    return typed_frame(points, columns, text_columns=("job",))  # a line a job
