"""Reading what a Gradio LinePlot drew: Gradio renders it with vega-lite as SVG, one
`g.mark-line path` a coloured series and one `.role-legend-label text` a legend entry."""
from __future__ import annotations


def line_points(page, plot_selector: str) -> list[int]:
    """Points on each line the chart drew (vega draws a line as 'M x,y L x,y ...')."""
    paths = page.locator(f"{plot_selector} g.mark-line path")
    return [(path.get_attribute("d") or "").count("L") + 1 for path in paths.all()]


def line_colours(page, plot_selector: str) -> list[str | None]:
    paths = page.locator(f"{plot_selector} g.mark-line path")
    return [path.get_attribute("stroke") for path in paths.all()]


def legend_labels(page, plot_selector: str) -> list[str]:
    labels = page.locator(f"{plot_selector} .role-legend-label text")
    return [label.text_content() or "" for label in labels.all()]
