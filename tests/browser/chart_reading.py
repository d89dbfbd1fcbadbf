"""Reading what a chart drew, for both kinds on the pages: the job page's own charts
(app/ui/charts/line_chart.py: a `path.td-series` a series, a `.td-legend-item` a legend entry) and
Gradio's LinePlot on the Compare tab (vega-lite SVG: a `g.mark-line path` a series, a
`.role-legend-label text` a legend entry).

Each reader takes every element in one `evaluate_all`: the chart redraws while a test reads it,
and reading path by path can wait on a path the redraw has just removed."""
from __future__ import annotations

SERIES = ("g.mark-line path", "path.td-series")
LEGEND = (".role-legend-label text", ".td-legend-item")


def _within(plot_selector: str, kinds: tuple[str, ...]) -> str:
    return ", ".join(f"{plot_selector} {kind}" for kind in kinds)


def line_points(page, plot_selector: str) -> list[int]:
    """Points on each series the chart drew: a line is 'M x,y L x,y ...', a series of
    points (and a line of one point) 'M x,y h0 M x,y h0 ...'."""
    paths = page.locator(_within(plot_selector, SERIES))
    return paths.evaluate_all("""els => els.map(e => {
        const d = e.getAttribute('d') || '';
        return d.includes('h0') ? d.split('h0').length - 1 : d.split('L').length;
    })""")


def line_colours(page, plot_selector: str) -> list[str | None]:
    paths = page.locator(_within(plot_selector, SERIES))
    return paths.evaluate_all("els => els.map(e => e.getAttribute('stroke'))")


def legend_labels(page, plot_selector: str) -> list[str]:
    labels = page.locator(_within(plot_selector, LEGEND))
    return labels.evaluate_all("els => els.map(e => (e.textContent || '').trim())")
