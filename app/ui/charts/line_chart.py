"""Line charts drawn on the server as static HTML and SVG: the job page's live charts.

Why not Gradio's LinePlot there: each update re-embeds a vega view (parse the spec, build
its dataflow, lay out, render), which cost the browser most of a core on a page that
updates every second (bench/live_view.py). Here an update is one swap of a few kilobytes
of markup: the browser parses and paints it, and no script runs.

The plot area is an SVG in fixed units (0..1000 both ways) stretched to its box
(`preserveAspectRatio="none"`), so one drawing fits any width. Strokes keep their width
(`vector-effect: non-scaling-stroke`); a point is a zero-length segment with a round cap,
so it stays round when the box stretches. Title, legend and tick labels are HTML around
and over it. Hovering: the plot carries, as one attribute, the text for each of a few dozen
vertical bands (each line's point nearest the band's middle), and a listener attached once
(`page_assets.HOVER_JS`) shows the band under the pointer. Not an SVG <title> a band: Gradio's HTML
component diffs its old and new content node by node on each update, so every node counts.
"""
from __future__ import annotations

import html
import json
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from app.ui.charts.scale import Scale, tick_labels

SIZE = 1000  # the plot's SVG units, both ways
HOVER_BANDS = 60
# Vega's default categorical scheme (tableau10), for series with no colour of their own.
PALETTE = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2",
           "#ff9da6", "#9d755d", "#bab0ac")
Kind = Literal["line", "faint", "points", "reference"]


@dataclass(frozen=True)
class Line:
    name: str
    points: Sequence[tuple[float, float]]
    colour: str
    kind: Kind = "line"  # faint: a raw line behind its smoothed one; reference: a level


@dataclass(frozen=True)
class Axes:
    title: str
    x_title: str
    y_title: str
    log_y: bool = False
    height: int = 240  # the plot area's, in CSS pixels


def frame_lines(frame: pd.DataFrame, *, x: str, y: str, series: str | None = None,
                colours: Mapping[str, str] | None = None,
                kinds: Mapping[str, Kind] | None = None) -> list[Line]:
    """One line a value of `series` (in order of first appearance), or one line named `y`
    without it. A series with only empty (NaN) rows is a line with no point: its legend
    entry is there before its first point."""
    colours, kinds = colours or {}, kinds or {}
    if series is None:
        groups = [(y, frame)]
    else:
        groups = [(str(name), part) for name, part in frame.groupby(series, sort=False)]
    lines = []
    for position, (name, part) in enumerate(groups):
        part = part[[x, y]].dropna()
        points = list(zip(part[x].astype(float), part[y].astype(float)))
        lines.append(Line(name, points, colours.get(name, PALETTE[position % len(PALETTE)]),
                          kinds.get(name, "line")))
    return lines


def typed_frame(points: list[tuple], columns: list[str], *,
                text_columns: tuple[str, ...] = ("series",)) -> pd.DataFrame:
    """A chart's rows as a frame whose numbers stay numbers even with no rows (an empty
    object column would read as categories, e.g. to a LinePlot, which keeps that scale)."""
    frame = pd.DataFrame(points, columns=columns)
    return frame.astype({column: ("string" if column in text_columns else "float64")
                         for column in columns})


def chart_html(lines: Sequence[Line], axes: Axes) -> str:
    """The chart as one HTML fragment; equal inputs give equal text (the page sends a
    chart again only when its text changed)."""
    if axes.log_y:  # a log axis has no place for zero or less
        lines = [Line(line.name, [(px, py) for px, py in line.points if py > 0], line.colour,
                      line.kind) for line in lines]
    xs = [px for line in lines for px, _ in line.points]
    ys = [py for line in lines for _, py in line.points]
    head = (f'<div class="td-chart-head"><span class="td-chart-title">{_text(axes.title)}</span>'
            f'{_legend(lines)}</div>')
    if not xs:
        body = '<div class="td-chart-empty">no points yet</div>'
        return (f'<div class="td-chart" role="figure" aria-label="{_text(axes.title)}">{head}'
                f'<div class="td-chart-plot" style="height:{axes.height}px">{body}</div></div>')
    # Steps are whole numbers: no tick at step 1.5.
    x_scale = Scale.linear(min(xs), max(xs), pad=False,
                           whole=all(float(px).is_integer() for px in xs))
    y_scale = Scale.log(min(ys), max(ys)) if axes.log_y else Scale.linear(min(ys), max(ys))
    y_title = f"{axes.y_title} (log scale)" if axes.log_y else axes.y_title
    y_labels = list(zip(map(y_scale.position, y_scale.ticks), tick_labels(y_scale)))
    gutter = max((len(label) for _, label in y_labels), default=1) + 1
    svg = "".join([
        f'<svg class="td-chart-svg" viewBox="0 0 {SIZE} {SIZE}" preserveAspectRatio="none" '
        f'aria-hidden="true">',
        *(f'<path class="td-grid" d="M0,{_svg_y(position)}H{SIZE}"/>' for position, _ in y_labels),
        *(_series_path(line, x_scale, y_scale) for line in _drawing_order(lines)),
        "</svg>",
    ])
    y_ticks = "".join(f'<span class="td-y-tick" style="bottom:{position * 100:.2f}%">'
                      f"{_text(label)}</span>" for position, label in y_labels)
    x_ticks = "".join(f'<span class="td-x-tick" style="left:{x_scale.position(tick) * 100:.2f}%">'
                      f"{_text(label)}</span>"
                      for tick, label in zip(x_scale.ticks, tick_labels(x_scale)))
    return (f'<div class="td-chart" role="figure" aria-label="{_text(axes.title)}">{head}'
            f'<div class="td-chart-body" style="grid-template-columns:1.4em {gutter}ch 1fr">'
            f'<div class="td-y-title"><span>{_text(y_title)}</span></div>'
            f'<div class="td-y-ticks">{y_ticks}</div>'
            f'<div class="td-chart-plot" style="height:{axes.height}px" '
            f'data-hover="{_text(json.dumps(hover_bands(lines, x_scale, axes)))}">{svg}</div>'
            f'<div></div><div></div><div class="td-x-ticks">{x_ticks}</div>'
            f'<div></div><div></div><div class="td-x-title">{_text(axes.x_title)}</div>'
            f"</div></div>")


def _drawing_order(lines: Iterable[Line]) -> list[Line]:
    """References under raw lines under lines under points."""
    order = {"reference": 0, "faint": 1, "line": 2, "points": 3}
    return sorted(lines, key=lambda line: order[line.kind])


def _series_path(line: Line, x_scale: Scale, y_scale: Scale) -> str:
    coordinates = [(_svg_x(x_scale.position(px)), _svg_y(y_scale.position(py)))
                   for px, py in line.points]
    if not coordinates:
        return ""
    if line.kind == "points" or len(coordinates) == 1:  # one point: no segment to draw
        d = "".join(f"M{px},{py}h0" for px, py in coordinates)
    else:
        d = "M" + "L".join(f"{px},{py}" for px, py in coordinates)
    kind = "points" if len(coordinates) == 1 else line.kind
    return (f'<path class="td-series td-{kind}" data-series="{_text(line.name)}" '
            f'stroke="{_text(line.colour)}" d="{d}"/>')


def hover_bands(lines: Sequence[Line], x_scale: Scale, axes: Axes) -> list[list]:
    """[left, right, text] a band of the plot (positions 0..1): each line's point nearest
    the band's middle among those inside it (a reference line's level anywhere); raw lines
    are left out, their smoothed line is the one read."""
    shown = [line for line in lines if line.kind != "faint" and line.points]
    sorted_lines = [(line, sorted(line.points)) for line in shown]
    bands = []
    for band in range(HOVER_BANDS if shown else 0):
        left, right = band / HOVER_BANDS, (band + 1) / HOVER_BANDS
        rows, at = [], None
        for line, points in sorted_lines:
            point = _nearest_inside(points, x_scale, left, right, anywhere=line.kind == "reference")
            if point is None:
                continue
            if at is None and line.kind != "reference":
                at = point[0]
            rows.append(f"{line.name}: {_value_text(point[1])}")
        if at is not None:
            bands.append([round(left, 4), round(right, 4),
                          f"{axes.x_title} {_value_text(at)}\n" + "\n".join(rows)])
    return bands


def _nearest_inside(points: list[tuple[float, float]], x_scale: Scale, left: float,
                    right: float, *, anywhere: bool) -> tuple[float, float] | None:
    middle = x_scale.low + (left + right) / 2 * (x_scale.high - x_scale.low)
    index = bisect_left(points, (middle, -math.inf))
    candidates = [points[i] for i in (index - 1, index) if 0 <= i < len(points)]
    if not candidates:
        return None
    point = min(candidates, key=lambda candidate: abs(candidate[0] - middle))
    return point if anywhere or left <= x_scale.position(point[0]) <= right else None


def _legend(lines: Sequence[Line]) -> str:
    if len(lines) < 2:
        return ""
    items = "".join(f'<span class="td-legend-item" data-kind="{line.kind}">'
                    f'<i style="--colour:{_text(line.colour)}"></i>{_text(line.name)}</span>'
                    for line in lines)
    return f'<span class="td-legend">{items}</span>'


def _value_text(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _svg_x(position: float) -> str:
    return f"{position * SIZE:.1f}".rstrip("0").rstrip(".")


def _svg_y(position: float) -> str:
    return f"{(1 - position) * SIZE:.1f}".rstrip("0").rstrip(".")


def _text(value: str) -> str:
    return html.escape(str(value), quote=True)
