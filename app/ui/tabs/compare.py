"""The "Compare" tab: two or more jobs' loss, throughput and memory overlaid, coloured by
job, and the spec fields that differ between them; it refreshes while any of them runs."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.auth.principal import principal_of
from app.ui import compare_handlers
from app.ui.compare_handlers import Comparison

REFRESH_SECONDS = 2.0
PLOT_HEIGHT = 300


@dataclass(frozen=True)
class CompareTab:
    job_ids: gr.Textbox  # set it (e.g. "3, 5") to compare those jobs


def build_compare_tab(*, database) -> CompareTab:
    with gr.Row():
        job_ids = gr.Textbox(label="Job ids", placeholder="3, 5, 8", scale=3,
                             elem_id="compare-ids")
        compare_button = gr.Button("Compare", variant="primary", scale=1,
                                   elem_id="compare-button")
    message = gr.Markdown(compare_handlers.NO_COMPARISON, elem_id="compare-message")
    with gr.Row():
        loss_plot = gr.LinePlot(x="step", y="loss", color="job", title="Loss by step",
                                x_title="step", y_title="loss", height=PLOT_HEIGHT,
                                elem_id="compare-loss-plot")
        throughput_plot = gr.LinePlot(x="step", y="tokens_per_second", color="job",
                                      title="Throughput by step", x_title="step",
                                      y_title="tokens / s", height=PLOT_HEIGHT,
                                      elem_id="compare-throughput-plot")
    memory_plot = gr.LinePlot(x="seconds", y="memory_mb", color="job",
                              title="Memory per rank (accelerator allocated, else process RSS)",
                              x_title="seconds since the job's first reading", y_title="MB",
                              height=PLOT_HEIGHT, elem_id="compare-memory-plot")
    diff_table = gr.Dataframe(label="Spec fields that differ", interactive=False, wrap=True,
                              elem_id="compare-diff")
    refresh_timer = gr.Timer(REFRESH_SECONDS, active=False)
    outputs = [message, loss_plot, throughput_plot, memory_plot, diff_table, refresh_timer]

    def refresh(ids_text, request: gr.Request):
        return _show(compare_handlers.load_comparison(ids_text, database=database,
                                                      principal=principal_of(request)))

    compare_button.click(refresh, job_ids, outputs, show_progress="hidden")
    job_ids.submit(refresh, job_ids, outputs, show_progress="hidden")
    job_ids.change(refresh, job_ids, outputs, show_progress="hidden", trigger_mode="always_last")
    refresh_timer.tick(refresh, job_ids, outputs, show_progress="hidden", concurrency_limit=None)
    return CompareTab(job_ids=job_ids)


def _show(comparison: Comparison) -> tuple:
    """The comparison as updates, in the order of the tab's outputs."""
    lines = comparison.lines
    return (comparison.message,
            compare_handlers.with_every_line(comparison.loss, lines.get("loss", [])),
            compare_handlers.with_every_line(comparison.throughput, lines.get("throughput", [])),
            compare_handlers.with_every_line(comparison.memory, lines.get("memory", [])),
            comparison.diff, gr.Timer(active=comparison.running))
