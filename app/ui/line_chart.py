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
(`HOVER_JS`) shows the band under the pointer. Not an SVG <title> a band: Gradio's HTML
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


@dataclass(frozen=True)
class Scale:
    """Data values to a 0..1 position along an axis, with the ticks it labels."""
    low: float
    high: float
    ticks: tuple[float, ...]
    tick_step: float  # between a linear scale's ticks, for their format
    logarithmic: bool = False

    @staticmethod
    def linear(low: float, high: float, *, pad: bool = True, count: int = 5,
               whole: bool = False) -> Scale:
        if high == low:  # one value: a window around it
            spread = abs(low) * 0.1 or 1.0
            low, high = low - spread, high + spread
        elif pad:  # a line along the top or bottom edge is hard to read
            margin = (high - low) * 0.05
            low, high = low - margin, high + margin
        step = max(nice_step((high - low) / count), 1.0) if whole else \
            nice_step((high - low) / count)
        first = math.ceil(low / step - 1e-9)
        ticks = tuple(round(k * step, 12) for k in range(first, math.floor(high / step + 1e-9) + 1))
        return Scale(low, high, ticks, step)

    @staticmethod
    def log(low: float, high: float) -> Scale:
        low_exponent, high_exponent = math.log10(low), math.log10(high)
        if high_exponent - low_exponent < 1e-9:
            low_exponent, high_exponent = low_exponent - 0.1, high_exponent + 0.1
        margin = (high_exponent - low_exponent) * 0.05
        low_exponent, high_exponent = low_exponent - margin, high_exponent + margin
        decades = range(math.floor(low_exponent), math.ceil(high_exponent) + 1)
        ticks: list[float] = []
        for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
            ticks = [m * 10.0 ** d for d in decades for m in mantissas
                     if low_exponent <= math.log10(m * 10.0 ** d) <= high_exponent]
            if len(ticks) >= 3:
                break
        # Log ticks are labelled each by its own digits (tick_labels), not by a step.
        return Scale(10.0 ** low_exponent, 10.0 ** high_exponent, tuple(ticks), 1.0,
                     logarithmic=True)

    def position(self, value: float) -> float:
        if self.logarithmic:
            low, high, value = math.log10(self.low), math.log10(self.high), math.log10(value)
        else:
            low, high = self.low, self.high
        return (value - low) / (high - low)


def nice_step(rough: float) -> float:
    """1, 2, 2.5 or 5 times a power of ten, the nearest at or above `rough`."""
    power = 10.0 ** math.floor(math.log10(rough))
    for mantissa in (1, 2, 2.5, 5, 10):
        if mantissa * power >= rough * (1 - 1e-9):
            return mantissa * power
    return 10 * power


def tick_labels(scale: Scale) -> list[str]:
    """A linear axis's labels with the decimals its step needs, thousands grouped; a log
    axis's each with its own digits; an axis of tiny or huge numbers all in scientific
    notation (1.5e-4), so one axis never mixes the two."""
    largest = max((abs(tick) for tick in scale.ticks), default=0.0)
    if largest and (largest < 1e-3 or largest >= 1e9):
        return [_scientific(tick) for tick in scale.ticks]
    if scale.logarithmic:
        return [f"{tick:,g}" for tick in scale.ticks]
    step = scale.tick_step  # 1, 2, 2.5 or 5 x 10^k: 2.5 needs a decimal more than 10^k
    decimals = 0 if step >= 1 else -math.floor(math.log10(step) + 1e-9) + (
        1 if round(step / 10 ** math.floor(math.log10(step) + 1e-9), 6) == 2.5 else 0)
    return [f"{tick:,.{decimals}f}" if tick else "0" for tick in scale.ticks]


def _scientific(value: float) -> str:
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)) + 1e-9)
    return f"{value / 10 ** exponent:.3g}e{exponent}"


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


CHART_CSS = """
.td-chart { font-size: 12px; color: var(--body-text-color); padding: 6px 4px 2px; }
.td-chart-head { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: baseline;
  margin-bottom: 6px; }
.td-chart-title { font-weight: 600; font-size: 13px; }
.td-legend { display: flex; flex-wrap: wrap; gap: 2px 12px; color: var(--body-text-color-subdued, #6b7280); }
.td-legend-item { white-space: nowrap; }
.td-legend-item i { display: inline-block; width: 14px; height: 3px; margin: 0 5px 3px 0;
  vertical-align: middle; background: var(--colour); }
.td-legend-item[data-kind="faint"] i { height: 2px; }
.td-legend-item[data-kind="points"] i { width: 7px; height: 7px; border-radius: 50%; }
.td-legend-item[data-kind="reference"] i { background: none; height: 0;
  border-top: 2px dashed var(--colour); }
.td-chart-body { display: grid; grid-template-rows: auto auto auto; }
.td-y-title { position: relative; }
.td-y-title span { position: absolute; left: 50%; top: 50%; white-space: nowrap;
  transform: translate(-50%, -50%) rotate(-90deg); color: var(--body-text-color-subdued, #6b7280); }
.td-y-ticks { position: relative; }
.td-y-tick { position: absolute; right: 6px; transform: translateY(50%); white-space: nowrap;
  font-variant-numeric: tabular-nums; opacity: .75; }
.td-chart-plot { position: relative; border-left: 1px solid var(--border-color-primary, #e5e7eb);
  border-bottom: 1px solid var(--border-color-primary, #e5e7eb); }
.td-chart-svg { position: absolute; inset: 0; width: 100%; height: 100%; overflow: visible; }
.td-chart-svg path { fill: none; vector-effect: non-scaling-stroke; stroke-linejoin: round; }
.td-grid { stroke: var(--border-color-primary, #e5e7eb); stroke-width: 1; opacity: .6; }
.td-line { stroke-width: 2; }
.td-faint { stroke-width: 1; opacity: .8; }
.td-reference { stroke-width: 1.5; stroke-dasharray: 6 4; }
.td-points { stroke-width: 7; stroke-linecap: round; }
.td-chart-plot[data-hover] { cursor: crosshair; }
.td-tip { position: fixed; z-index: 1000; pointer-events: none; white-space: pre; font-size: 12px;
  padding: 4px 8px; border-radius: 4px; background: var(--background-fill-primary, #fff);
  color: var(--body-text-color, #111); border: 1px solid var(--border-color-primary, #e5e7eb);
  box-shadow: 0 2px 6px rgba(0, 0, 0, .15); font-variant-numeric: tabular-nums; }
.td-rule { position: absolute; top: 0; bottom: 0; width: 0; pointer-events: none;
  border-left: 1px dashed var(--body-text-color-subdued, #6b7280); }
.td-x-ticks { position: relative; height: 1.6em; }
.td-x-tick { position: absolute; top: 3px; transform: translateX(-50%); white-space: nowrap;
  font-variant-numeric: tabular-nums; opacity: .75; }
.td-x-title { text-align: center; color: var(--body-text-color-subdued, #6b7280); }
.td-chart-empty { position: absolute; inset: 0; display: flex; align-items: center;
  justify-content: center; color: var(--body-text-color-subdued, #6b7280); }
"""

# A chart component's `js_on_load`: runs once per component, and its listeners outlive the
# updates (they sit on the component's element, which the updates diff into, not replace).
HOVER_JS = """
const tip = document.createElement('div');
tip.className = 'td-tip';
tip.hidden = true;
document.body.appendChild(tip);
let parsed = {source: null, bands: []};
const hide = () => {
  tip.hidden = true;
  element.querySelectorAll('.td-rule').forEach((rule) => rule.remove());
};
element.addEventListener('mousemove', (event) => {
  const plot = event.target.closest && event.target.closest('.td-chart-plot[data-hover]');
  if (!plot) { hide(); return; }
  if (parsed.source !== plot.dataset.hover) {
    parsed = {source: plot.dataset.hover, bands: JSON.parse(plot.dataset.hover || '[]')};
  }
  const box = plot.getBoundingClientRect();
  const at = (event.clientX - box.left) / box.width;
  const band = parsed.bands.find(([left, right]) => at >= left && at <= right);
  if (!band) { hide(); return; }
  tip.textContent = band[2];
  tip.hidden = false;
  const flip = event.clientX + tip.offsetWidth + 24 > window.innerWidth;
  tip.style.left = (flip ? event.clientX - tip.offsetWidth - 12 : event.clientX + 12) + 'px';
  tip.style.top = (event.clientY + 12) + 'px';
  let rule = plot.querySelector('.td-rule');
  if (!rule) { rule = document.createElement('div'); rule.className = 'td-rule'; plot.appendChild(rule); }
  rule.style.left = (at * 100) + '%';
});
element.addEventListener('mouseleave', hide);
"""
