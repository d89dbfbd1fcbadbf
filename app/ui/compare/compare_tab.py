"""The "Compare" tab: two or more jobs' loss, throughput and memory overlaid, coloured by
job (and, when a compared job is a preference job, its rewards, reward margin, preference
accuracy and log-probs), and the spec fields that differ between them; it refreshes while
any of them runs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from app.auth.principal import principal_of
from app.ui.compare import compare_handlers
from app.ui.compare.compare_handlers import PREFERENCE_COLUMNS, Comparison, compare_elem_id
from tunedeck.metrics.figures import OBJECTIVE_CHARTS, FigureChart

REFRESH_SECONDS = 2.0
PLOT_HEIGHT = 300


@dataclass(frozen=True)
class CompareTab:
    job_ids: gr.Textbox  # set it (e.g. "3, 5") to compare those jobs
    picker: gr.Dropdown  # the jobs picked, to show the same ones as job_ids
    # Draw the comparison of job_ids into outputs: a value set from another tab does not
    # fire job_ids' own change (the tab renders lazily), so that tab chains this after it.
    show: Any
    outputs: list[Any]
    refresh_timer: gr.Timer  # not rendered: build_ui renders it and stops it while hidden


@dataclass(frozen=True)
class CompareLayout:
    picker: gr.Dropdown
    job_ids: gr.Textbox
    compare_button: gr.Button
    drawn: list[Any]  # the message, charts, tables and timer, in `_show`'s order
    refresh_timer: gr.Timer


def build_compare_tab(*, database) -> CompareTab:
    layout = lay_out_compare_tab()
    wire_picker(layout, database=database)
    refresh = wire_refresh(layout, database=database)
    return CompareTab(job_ids=layout.job_ids, picker=layout.picker, show=refresh,
                      outputs=layout.drawn, refresh_timer=layout.refresh_timer)


def lay_out_compare_tab() -> CompareLayout:
    with gr.Row():
        picker = gr.Dropdown([], multiselect=True, label="Jobs to compare", scale=3,
                             info="your jobs, newest first", elem_id="compare-picker")
        job_ids = gr.Textbox(label="Job ids", placeholder="3, 5, 8", scale=2,
                             elem_id="compare-ids")
        compare_button = gr.Button("Compare", variant="primary", scale=1,
                                   elem_id="compare-button")
    message = gr.Markdown(compare_handlers.NO_COMPARISON, elem_id="compare-message")
    charts = _charts()
    summary_table = gr.Dataframe(label="Figures", interactive=False, wrap=True, visible=False,
                                 elem_id="compare-summary")
    diff_table = gr.Dataframe(label="Spec fields that differ", interactive=False, wrap=True,
                              visible=False, elem_id="compare-diff")
    # On while a compared job runs (the comparison says so) and the tab is shown; build_ui
    # renders it outside the tabs and switches it off while another tab is shown.
    refresh_timer = gr.Timer(REFRESH_SECONDS, active=False, render=False)
    drawn = [message, *charts, summary_table, diff_table, refresh_timer]
    return CompareLayout(picker, job_ids, compare_button, drawn, refresh_timer)


def _charts() -> list[gr.LinePlot]:
    """Loss, throughput, memory, then a preference job's figures, hidden until drawn."""
    with gr.Row():
        loss_plot = gr.LinePlot(x="step", y="loss", color="job", title="Loss by step",
                                x_title="step", y_title="loss", height=PLOT_HEIGHT,
                                visible=False, elem_id="compare-loss-plot")
        throughput_plot = gr.LinePlot(x="step", y="tokens_per_second", color="job",
                                      title="Throughput by step", x_title="step",
                                      y_title="tokens / s", height=PLOT_HEIGHT,
                                      visible=False, elem_id="compare-throughput-plot")
    memory_plot = gr.LinePlot(x="seconds", y="memory_mb", color="job",
                              title="Memory per rank (accelerator allocated, else process RSS)",
                              x_title="seconds since the job's first reading", y_title="MB",
                              height=PLOT_HEIGHT, visible=False, elem_id="compare-memory-plot")
    # A preference job's figures, two charts a row; hidden unless a compared job has them.
    preference_plots = []
    for start in range(0, len(OBJECTIVE_CHARTS), 2):
        with gr.Row():
            preference_plots += [_preference_plot(chart)
                                 for chart in OBJECTIVE_CHARTS[start:start + 2]]
    return [loss_plot, throughput_plot, memory_plot, *preference_plots]


def _preference_plot(chart: FigureChart) -> gr.LinePlot:
    title = f"{chart.title} by step"
    if len(chart.lines) > 1:  # chosen and rejected: one colour a job, the second lighter
        title += f" ({chart.lines[-1][0]}: the lighter line)"
    x, y, job = PREFERENCE_COLUMNS
    return gr.LinePlot(x=x, y=y, color=job, title=title, x_title="step", y_title=chart.y_title,
                       height=PLOT_HEIGHT, visible=False, elem_id=compare_elem_id(chart))


def wire_picker(layout: CompareLayout, *, database) -> None:
    """The picker offers one's jobs as it is opened, and its picks fill the ids box."""
    def offer_jobs(request: gr.Request):
        return gr.Dropdown(choices=compare_handlers.pickable_jobs(
            database=database, principal=principal_of(request)))

    def picked(job_numbers):
        return ", ".join(str(job_id) for job_id in job_numbers or ()) or gr.skip()

    layout.picker.focus(offer_jobs, None, layout.picker, show_progress="hidden")
    layout.picker.change(picked, layout.picker, layout.job_ids, show_progress="hidden")


def wire_refresh(layout: CompareLayout, *, database) -> Callable[..., tuple]:
    """The comparison redraws on Compare, on the ids' change or submit, and on each tick
    (while a compared job runs and the tab is shown). Returns the redraw, for build_ui to
    chain after it sets the ids from another tab."""
    def refresh(ids_text, request: gr.Request):
        return _show(compare_handlers.load_comparison(ids_text, database=database,
                                                      principal=principal_of(request)))

    job_ids, drawn = layout.job_ids, layout.drawn
    layout.compare_button.click(refresh, job_ids, drawn, show_progress="hidden")
    job_ids.submit(refresh, job_ids, drawn, show_progress="hidden")
    job_ids.change(refresh, job_ids, drawn, show_progress="hidden", trigger_mode="always_last")
    layout.refresh_timer.tick(refresh, job_ids, drawn, show_progress="hidden",
                              concurrency_limit=None)
    return refresh


def _show(comparison: Comparison) -> tuple:
    """The comparison as updates, in the order of `CompareLayout.drawn`."""
    lines = comparison.lines
    # A chart only ever gets data with its colours: drawn once without them (say, while
    # only one id is picked), it would keep drawing its lines uncoloured.
    charts = [gr.LinePlot(compare_handlers.with_every_line(frame, lines.get(name, [])),
                          color_map=comparison.colours, visible=True)
              if comparison.shown else gr.LinePlot(visible=False)
              for frame, name in ((comparison.loss, "loss"),
                                  (comparison.throughput, "throughput"),
                                  (comparison.memory, "memory"))]
    # Shown when a compared job is a preference job (its lines are listed), else hidden.
    preference = [gr.LinePlot(compare_handlers.with_every_line(comparison.preference[chart.name],
                                                               lines[chart.name]),
                              color_map=comparison.colours, visible=True)
                  if lines.get(chart.name) else gr.LinePlot(visible=False)
                  for chart in OBJECTIVE_CHARTS]
    # Before there is anything to compare, only the message says what to do.
    return (comparison.message, *charts, *preference,
            gr.Dataframe(comparison.summary, visible=comparison.shown),
            gr.Dataframe(comparison.diff, visible=comparison.shown),
            gr.Timer(active=comparison.running))
