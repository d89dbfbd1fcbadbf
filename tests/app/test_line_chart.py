"""The job page's server-drawn charts: scales, tick labels, what each kind of line draws,
hover text, and that hostile series names stay text."""
from __future__ import annotations

import html
import json
import re

import pandas as pd
import pytest

from app.ui.charts.line_chart import PALETTE, Axes, Line, chart_html, frame_lines
from app.ui.charts.scale import Scale, nice_step, tick_labels

AXES = Axes("Loss", x_title="step", y_title="loss")


def y_ticks(chart: str) -> list[str]:
    return re.findall(r'class="td-y-tick"[^>]*>([^<]*)<', chart)


def x_ticks(chart: str) -> list[str]:
    return re.findall(r'class="td-x-tick"[^>]*>([^<]*)<', chart)


def paths(chart: str) -> dict[str, tuple[str, str]]:
    """Series name -> (kind, d)."""
    return {name: (kind, d) for kind, name, d in re.findall(
        r'<path class="td-series td-(\w+)" data-series="([^"]*)" stroke="[^"]*" d="([^"]*)"',
        chart)}


@pytest.mark.parametrize("rough, step", [(0.7, 1.0), (1.3, 2.0), (2.2, 2.5), (3.0, 5.0),
                                         (7.0, 10.0), (0.013, 0.02), (240.0, 250.0)])
def test_nice_steps(rough, step):
    assert nice_step(rough) == pytest.approx(step)


def test_linear_ticks_cover_the_padded_range_with_the_decimals_their_step_needs():
    scale = Scale.linear(0.52, 1.49)
    assert scale.low < 0.52 and scale.high > 1.49  # a line never runs along the frame
    assert tick_labels(scale) == ["0.50", "0.75", "1.00", "1.25", "1.50"]  # a step of 0.25
    assert tick_labels(Scale.linear(0, 4000, pad=False)) == \
        ["0", "1,000", "2,000", "3,000", "4,000"]
    assert tick_labels(Scale.linear(1.0, 2.0, pad=False, count=4)) == ["1.00", "1.25", "1.50", "1.75", "2.00"]


def test_tiny_values_are_scientific_on_the_whole_axis_and_one_value_gets_a_window():
    assert tick_labels(Scale.linear(0.0, 2e-4, pad=False)) == \
        ["0", "5e-5", "1e-4", "1.5e-4", "2e-4"]
    single = Scale.linear(3.0, 3.0)
    assert single.low < 3.0 < single.high and single.position(3.0) == pytest.approx(0.5)
    # An EMA of a constant 1,000 tokens/s differs from it by float rounding only: the same
    # window, not "1,000.00000000000000" with the rounding drawn as the plot's height.
    rounded = Scale.linear(999.9999999999998, 1000.0000000000002)
    assert (rounded.low, rounded.high) == (pytest.approx(900.0), pytest.approx(1100.0))
    assert tick_labels(rounded) == ["900", "950", "1,000", "1,050", "1,100"]


def test_a_log_scale_ticks_at_1_2_5_and_places_decades_evenly():
    scale = Scale.log(0.3, 20.0)
    assert tick_labels(scale) == ["0.5", "1", "2", "5", "10", "20"]
    assert scale.position(10.0) - scale.position(1.0) == \
        pytest.approx(scale.position(1.0) - scale.position(0.1))


def test_each_kind_of_line_draws_as_it_should():
    chart = chart_html([
        Line("train (raw)", [(1, 3.0), (2, 2.0), (3, 2.5)], "#ccc", "faint"),
        Line("train", [(1, 3.0), (2, 2.6), (3, 2.5)], "#00f"),
        Line("eval", [(2, 2.4), (3, 2.3)], "#f80", "points"),
        Line("planned peak", [(1, 2.8), (3, 2.8)], "#0a0", "reference"),
    ], AXES)
    drawn = paths(chart)
    assert drawn["train"][0] == "line" and drawn["train"][1].count("L") == 2
    assert drawn["eval"][0] == "points" and drawn["eval"][1].count("h0") == 2
    assert drawn["train (raw)"][0] == "faint" and drawn["planned peak"][0] == "reference"
    # Drawn bottom to top: the reference, the raw line, the line, the points.
    assert list(drawn) == ["planned peak", "train (raw)", "train", "eval"]
    assert re.findall(r'class="td-legend-item" data-kind="(\w+)"', chart) == \
        ["faint", "line", "points", "reference"]
    # The x axis spans the data; its ends are the frame's edges.
    assert drawn["train"][1].startswith("M0,") and "L1000," in drawn["train"][1]


def hover_texts(chart: str) -> list[str]:
    attribute = re.search(r'data-hover="([^"]*)"', chart).group(1)
    return [text for _left, _right, text in json.loads(html.unescape(attribute))]


def test_hovering_names_each_lines_nearest_point_and_skips_raw_lines():
    chart = chart_html([Line("train (raw)", [(1, 3.0), (2, 2.0)], "#ccc", "faint"),
                        Line("train", [(1, 3.0), (2, 2.5)], "#00f"),
                        Line("eval", [(2, 2.25)], "#f80", "points")], AXES)
    texts = hover_texts(chart)
    assert texts[0] == "step 1\ntrain: 3"
    assert texts[-1] == "step 2\ntrain: 2.5\neval: 2.25"
    assert not any("raw" in text for text in texts)
    # One attribute, not a node a band: Gradio diffs every node of the chart each update.
    assert "<rect" not in chart and "<title" not in chart


def test_one_point_is_a_dot_and_no_point_says_so():
    drawn = paths(chart_html([Line("train", [(5, 1.0)], "#00f")], AXES))
    assert drawn["train"][0] == "points"
    empty = chart_html([Line("train", [], "#00f"), Line("eval", [], "#f80", "points")], AXES)
    assert "no points yet" in empty and "td-legend-item" in empty  # the legend is there already


def test_a_log_chart_leaves_out_what_it_cannot_place():
    chart = chart_html([Line("train", [(1, 0.0), (2, 1.0), (3, 0.5)], "#00f")],
                       Axes("Loss", "step", "loss", log_y=True))
    assert paths(chart)["train"][1].count("L") == 1  # the zero is not on a log axis


def test_series_names_and_titles_are_text_not_markup():
    chart = chart_html([Line('<img src=x onerror="alert(1)">', [(1, 1.0), (2, 2.0)], "#00f"),
                        Line("b", [(1, 1.0)], "#f00")],
                       Axes("<b>t</b>", "x", "y"))
    assert "<img" not in chart and "<b>" not in chart
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in chart


def test_the_same_data_draws_the_same_text():
    lines = [Line("train", [(1, 3.0), (2, 2.5)], "#00f")]
    assert chart_html(lines, AXES) == chart_html(list(lines), AXES)


def test_frames_become_lines_by_series_in_order_with_empty_series_kept():
    frame = pd.DataFrame({"step": [1.0, 2.0, None, 1.0], "loss": [3.0, 2.0, None, 2.9],
                          "series": ["train", "train", "eval", "rank 1"]})
    lines = frame_lines(frame, x="step", y="loss", series="series", colours={"eval": "#f80"},
                        kinds={"eval": "points"})
    assert [(line.name, len(line.points), line.kind) for line in lines] == \
        [("train", 2, "line"), ("eval", 0, "points"), ("rank 1", 1, "line")]
    assert [line.colour for line in lines] == [PALETTE[0], "#f80", PALETTE[2]]
    single = frame_lines(frame, x="step", y="loss")
    assert [line.name for line in single] == ["loss"]


def test_a_narrow_range_gets_the_decimals_to_tell_its_ticks_apart():
    labels = tick_labels(Scale.linear(0.0049990, 0.0050000))
    assert len(set(labels)) == len(labels) > 2, labels


def test_a_step_axis_ticks_whole_steps_only():
    chart = chart_html([Line("train", [(1, 3.0), (2, 2.0), (3, 1.0)], "#00f")], AXES)
    assert x_ticks(chart) == ["1", "2", "3"]
