"""The job page's live signals: the progress line (under the headline) and the charts of the
worker's samples and the step figures (under the loss and memory charts)."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.ui.live_charts import LiveCharts

PLOT_HEIGHT = 240


@dataclass(frozen=True)
class LivePanel:
    progress: gr.HTML
    sampled_memory: gr.LinePlot
    learning_rate: gr.LinePlot
    grad_norm: gr.LinePlot
    step_time: gr.LinePlot
    mfu: gr.LinePlot

    @property
    def outputs(self) -> list:
        return [self.progress, self.sampled_memory, self.learning_rate, self.grad_norm,
                self.step_time, self.mfu]


def build_progress() -> gr.HTML:
    return gr.HTML(elem_id="job-progress")


def build_live_panel(progress: gr.HTML) -> LivePanel:
    sampled_memory = gr.LinePlot(x="seconds", y="memory_mb", color="series",
                                 title="Memory per GPU", x_title="seconds since first sample",
                                 y_title="MB", height=PLOT_HEIGHT, elem_id="job-gpu-memory-plot")
    with gr.Row():
        learning_rate = _step_plot("learning_rate", "Learning rate", "job-lr-plot")
        grad_norm = _step_plot("grad_norm", "Gradient norm", "job-grad-norm-plot")
    with gr.Row():
        step_time = _step_plot("step_seconds", "Step time (s)", "job-step-time-plot")
        mfu = _step_plot("mfu", "MFU (model FLOPs utilisation)", "job-mfu-plot", visible=False)
    return LivePanel(progress, sampled_memory, learning_rate, grad_norm, step_time, mfu)


def _step_plot(y: str, title: str, elem_id: str, *, visible: bool = True) -> gr.LinePlot:
    return gr.LinePlot(x="step", y=y, title=title, x_title="step", y_title=title,
                       height=PLOT_HEIGHT, elem_id=elem_id, visible=visible)


def show_live(live: LiveCharts) -> tuple:
    """Updates in the order of `LivePanel.outputs`."""
    return (
        live.progress_html,
        gr.LinePlot(live.sampled_memory, title=live.sampled_memory_title),
        live.learning_rate, live.grad_norm, live.step_time,
        gr.LinePlot(live.mfu, visible=live.has_mfu),
    )
