"""The job page's live signals: the progress line (under the headline) and the charts of the
worker's samples and the step figures (under the loss and memory charts)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gradio as gr
import pandas as pd

from app.ui.job_page.live_charts import LiveCharts
from tunedeck.metrics.figures import (GPU_USED_MB, GRAD_NORM, LEARNING_RATE, MFU, STEP_SECONDS,
                                      Figure)

PLOT_HEIGHT = 240


@dataclass(frozen=True)
class LivePanel:
    progress: gr.HTML
    sampled_memory: gr.LinePlot
    memory_comparison: gr.Markdown  # the planner's bytes against each rank's
    learning_rate: gr.LinePlot
    grad_norm: gr.LinePlot
    step_time: gr.LinePlot
    mfu: gr.LinePlot
    more_charts: gr.Accordion  # the four charts after the memory chart

    @property
    def outputs(self) -> list:
        return [self.progress, self.sampled_memory, self.memory_comparison, self.learning_rate,
                self.grad_norm, self.step_time, self.mfu]

    @property
    def folded_outputs(self) -> list:
        """The outputs inside `more_charts`."""
        return [self.learning_rate, self.grad_norm, self.step_time, self.mfu]


def build_progress() -> gr.HTML:
    return gr.HTML(elem_id="job-progress")


def build_live_panel(progress: gr.HTML) -> LivePanel:
    sampled_memory = gr.LinePlot(x="seconds", y="memory_mb", color="series",
                                 title=GPU_USED_MB.title, x_title="seconds since the job started",
                                 y_title="MiB", height=PLOT_HEIGHT, elem_id="job-memory-plot")
    memory_comparison = gr.Markdown(elem_id="job-memory-comparison")
    # Folded away, these charts cost the browser nothing: the page holds their updates.
    with gr.Accordion("Learning rate, gradient norm, step time, MFU", open=True,
                      elem_id="job-more-charts") as more_charts:
        with gr.Row():
            learning_rate = _step_plot(LEARNING_RATE, "job-lr-plot")
            grad_norm = _step_plot(GRAD_NORM, "job-grad-norm-plot")
        with gr.Row():
            step_time = _step_plot(STEP_SECONDS, "job-step-time-plot")
            mfu = _step_plot(MFU, "job-mfu-plot", visible=False)
    return LivePanel(progress, sampled_memory, memory_comparison, learning_rate, grad_norm,
                     step_time, mfu, more_charts)


def _step_plot(figure: Figure, elem_id: str, *, visible: bool = True) -> gr.LinePlot:
    return gr.LinePlot(x="step", y=figure.field, title=figure.title, x_title="step",
                       y_title=figure.title,
                       height=PLOT_HEIGHT, elem_id=elem_id, visible=visible)


def show_live(live: LiveCharts, memory_comparison: str,
              shown: Callable[[pd.DataFrame], bool] = lambda _frame: True) -> tuple:
    """Updates in the order of `LivePanel.outputs`; `shown` says whether a chart of a
    frame is drawn (a finished job's empty charts are not)."""
    return (
        live.progress_html,
        gr.LinePlot(live.sampled_memory, title=live.sampled_memory_title,
                    visible=shown(live.sampled_memory)),
        memory_comparison,
        *(gr.LinePlot(frame, visible=shown(frame))
          for frame in (live.learning_rate, live.grad_norm, live.step_time)),
        gr.LinePlot(live.mfu, visible=live.has_mfu),
    )
