"""Reading what a Gradio LinePlot drew: Gradio renders it with vega-lite as SVG, one
`g.mark-line path` a coloured series and one `.role-legend-label text` a legend entry.

Each reader takes every element in one `evaluate_all`: the chart redraws while a test reads it,
and reading path by path can wait on a path the redraw has just removed."""
from __future__ import annotations


def line_points(page, plot_selector: str) -> list[int]:
    """Points on each line the chart drew (vega draws a line as 'M x,y L x,y ...')."""
    paths = page.locator(f"{plot_selector} g.mark-line path")
    return [(d or "").count("L") + 1
            for d in paths.evaluate_all("els => els.map(e => e.getAttribute('d'))")]


def line_colours(page, plot_selector: str) -> list[str | None]:
    paths = page.locator(f"{plot_selector} g.mark-line path")
    return paths.evaluate_all("els => els.map(e => e.getAttribute('stroke'))")


def legend_labels(page, plot_selector: str) -> list[str]:
    labels = page.locator(f"{plot_selector} .role-legend-label text")
    return labels.evaluate_all("els => els.map(e => e.textContent || '')")
