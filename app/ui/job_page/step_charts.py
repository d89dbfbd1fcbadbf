"""The job page's step charts: loss and throughput by step as frames (smoothed, each raw
line kept faint behind its smoothed one, eval losses as points) and as the charts drawn
from them; and, smoothed the same way, charts of several figures a line each (a preference
job's rewards, margin, accuracy and log-probs: `tunedeck.metrics.figures.OBJECTIVE_CHARTS`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from app.ui.charts.line_chart import Axes, Line, chart_html, frame_lines, typed_frame
from tunedeck.metrics.figures import EVAL_LOSS, LOSS, TOKENS_PER_SECOND, FigureChart

LOSS_COLUMNS = ["step", LOSS.field, "series"]
TRAIN_SERIES, EVAL_SERIES = "train", "eval"
TOKENS_SERIES = "tokens/s"
THROUGHPUT_COLUMNS = ["step", TOKENS_PER_SECOND.field, "series"]
FIGURE_CHART_COLUMNS = ["step", "value", "series"]  # a FigureChart's lines, by their names
# A chart is about 650 px wide at 1440 px: more points than every other pixel only cost the browser
# its redraw each second, and a week-long job must not ship 10^5 points a tick.
MAX_POINTS_PER_LINE = 400
CHART_HEIGHT = 240  # the plot area, CSS pixels


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
                EVAL_SERIES: "#ff7f0e",
                TOKENS_SERIES: "#2ca02c", TOKENS_SERIES + RAW_SUFFIX: "#c7e9c0"}
# A preference chart's lines (`FigureChart` line names): chosen green, rejected red.
FIGURE_LINE_COLOURS = {"chosen": "#2ca02c", "chosen" + RAW_SUFFIX: "#c7e9c0",
                       "rejected": "#d62728", "rejected" + RAW_SUFFIX: "#f7c4c4",
                       "margin": "#9467bd", "margin" + RAW_SUFFIX: "#dadaeb",
                       "accuracy": "#1f77b4", "accuracy" + RAW_SUFFIX: "#c6dbef"}


def smoothed(values: list[float], weight: float) -> list[float]:
    """The exponential moving average TensorBoard and W&B draw, debiased so the first
    points are not pulled towards 0."""
    out, average = [], 0.0
    for count, value in enumerate(values, start=1):
        average = average * weight + (1 - weight) * value
        out.append(average / (1 - weight ** count))
    return out


def loss_frame(train: list[dict[str, Any]], evaluations: list[dict[str, Any]] = (), *,
               with_eval: bool = False, view: ChartView = ChartView(smoothing=0.0)) -> pd.DataFrame:
    """The training loss by step, smoothed as `view` says (its raw line kept as
    "train (raw)"), and the eval loss as it was measured, its own series: a point an eval.

    A series with no point yet is one empty (NaN) row, so the legend names it from the
    start (the eval points come only after `eval_every_steps` steps)."""
    rows = _with_smoothing({TRAIN_SERIES: _step_points(train, LOSS.field)}, view.smoothing)
    if with_eval or evaluations:
        rows += _with_smoothing({EVAL_SERIES: _step_points(evaluations, EVAL_LOSS.field)}, 0.0)
    return typed_frame(rows, LOSS_COLUMNS)


def throughput_frame(train: list[dict[str, Any]], *,
                     view: ChartView = ChartView(smoothing=0.0)) -> pd.DataFrame:
    lines = {TOKENS_SERIES: _step_points(train, TOKENS_PER_SECOND.field)}
    return typed_frame(_with_smoothing(lines, view.smoothing), THROUGHPUT_COLUMNS)


def figure_chart_frame(train: list[dict[str, Any]], chart: FigureChart, *,
                       view: ChartView = ChartView(smoothing=0.0)) -> pd.DataFrame:
    """A line a figure of `chart` by step, each smoothed as the loss is (its raw line kept
    as "NAME (raw)"); a line with no point is one empty row, as in `loss_frame`. A keyed
    figure adds a line for each label its steps carry (grpo's each reward)."""
    lines = {name: _step_points(train, figure.field) for name, figure in chart.lines}
    if chart.keyed is not None:
        labels = dict.fromkeys(label for row in train
                               for label in (row.get(chart.keyed.field) or {}))
        lines.update({label: [(row["step"], row[chart.keyed.field][label]) for row in train
                              if (row.get(chart.keyed.field) or {}).get(label) is not None]
                      for label in labels})
    return typed_frame(_with_smoothing(lines, view.smoothing), FIGURE_CHART_COLUMNS)


def figure_chart_html(chart: FigureChart, frame: pd.DataFrame, *,
                      height: int = CHART_HEIGHT) -> str:
    """The chart of a `figure_chart_frame`: each smoothed line over its faint raw one."""
    return chart_html(_step_lines(frame, "value", FIGURE_LINE_COLOURS),
                      Axes(chart.title, x_title="step", y_title=chart.y_title, height=height))


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


def _step_lines(frame: pd.DataFrame, field_name: str,
                colours: dict[str, str] = LINE_COLOURS) -> list[Line]:
    kinds = {name: ("faint" if name.endswith(RAW_SUFFIX) else
                    "points" if name == EVAL_SERIES else "line")
             for name in frame["series"].dropna().unique()}
    return frame_lines(frame, x="step", y=field_name, series="series", colours=colours,
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
