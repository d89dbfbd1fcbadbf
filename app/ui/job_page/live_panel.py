"""The job page's live signals: the progress line (under the headline), a preference or RL
job's charts and an RL job's rollouts (under the loss and throughput) and the charts of the worker's samples and the step
figures (under the memory chart)."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable

import gradio as gr
import pandas as pd

from app.ui.job_page.live_charts import CAPACITY_SERIES, PLANNED_SERIES, LiveCharts
from app.ui.job_page.step_charts import figure_chart_html
from app.ui.charts.line_chart import Axes, chart_html, frame_lines
from app.ui.charts.page_assets import HOVER_JS
from tunedeck.metrics.figures import (GRAD_NORM, LEARNING_RATE, MFU, OBJECTIVE_CHARTS,
                                      STEP_SECONDS, Figure, FigureChart)

PLOT_HEIGHT = 200  # the plot area, CSS pixels
MEMORY_X_TITLE = "seconds since the job started"


@dataclass(frozen=True)
class LivePanel:
    progress: gr.HTML
    sampled_memory: gr.HTML
    memory_comparison: gr.Markdown  # the planner's bytes against each rank's
    learning_rate: gr.HTML
    grad_norm: gr.HTML
    step_time: gr.HTML
    mfu: gr.HTML
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


def preference_elem_id(chart: FigureChart) -> str:
    """"job-rewards-plot", "job-reward-margin-plot", ...: each chart's box in the panel."""
    return f"job-{chart.name.replace('_', '-')}-plot"


def build_preference_panel() -> gr.HTML:
    """A preference (DPO) job's rewards (chosen and rejected), reward margin, preference
    accuracy and log-probs (chosen and rejected), two charts a row: one component, hidden
    until the job's steps carry a figure of them (`show_preference`), so an SFT job's page
    has neither the charts nor an empty row's gap."""
    return gr.HTML(preference_panel_html(LiveCharts()), js_on_load=HOVER_JS,
                   elem_id="job-preference-charts", visible=False)


def preference_panel_html(live: LiveCharts) -> str:
    """The charts the job has points for, in a grid of two columns."""
    charts = "".join(f'<div id="{preference_elem_id(chart)}" style="min-width:0">'
                     f"{figure_chart_html(chart, live.preference[chart.name], height=PLOT_HEIGHT)}"
                     f"</div>" for chart in OBJECTIVE_CHARTS if live.has_chart(chart))
    return (f'<div class="td-preference-charts" style="display:grid;'
            f'grid-template-columns:repeat(2,minmax(0,1fr));gap:16px">{charts}</div>'
            + rollouts_html(live.rollouts))


def show_preference(live: LiveCharts) -> gr.HTML:
    return gr.HTML(preference_panel_html(live),
                   visible=any(live.has_chart(chart) for chart in OBJECTIVE_CHARTS)
                   or bool(live.rollouts))


ROLLOUT_TEXT_CHARACTERS = 400  # a completion's first characters in the table


def rollouts_html(rollouts: list[dict]) -> str:
    """A GRPO job's kept rollouts as a table, newest step first: each prompt, then each of
    its completions with its reward and each reward's score, the best of the group marked.
    Nothing for a job with none."""
    if not rollouts:
        return ""
    labels = list(dict.fromkeys(label for rollout in rollouts for sample in rollout["samples"]
                                for completion in sample["completions"]
                                for label in completion["rewards"]))
    head = "".join(f"<th>{html.escape(label)}</th>" for label in labels)
    rows = []
    for rollout in rollouts:
        for sample in rollout["samples"]:
            completions = sample["completions"]
            rewards = [completion["reward"] for completion in completions]
            # The group's best, where the group told its completions apart at all.
            best = max(rewards) if rewards and max(rewards) > min(rewards) else None
            rows.append(f'<tr class="rollout-prompt"><td>{rollout["step"]}</td>'
                        f'<td colspan="{2 + len(labels)}"><b>Prompt:</b> '
                        f'{html.escape(sample["prompt"])}</td></tr>')
            for completion in completions:
                text = completion["text"]
                shown = html.escape(text[:ROLLOUT_TEXT_CHARACTERS]) + (
                    "…" if len(text) > ROLLOUT_TEXT_CHARACTERS else "")
                mark = ' class="rollout-best"' if completion["reward"] == best else ""
                scores = "".join(f"<td>{_score(completion['rewards'].get(label))}</td>"
                                 for label in labels)
                rows.append(f"<tr{mark}><td></td><td><pre>{shown or '(empty)'}</pre></td>"
                            f"<td>{_score(completion['reward'])}</td>{scores}</tr>")
    return ('<div id="job-rollouts"><h4>Rollouts (newest first): a prompt, all its completions '
            "and their rewards</h4>"
            '<div class="rollouts-box" style="max-height:480px;overflow:auto">'
            '<table class="rollouts"><thead><tr><th>step</th><th>completion</th>'
            f"<th>reward</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "</div></div>")


def _score(value) -> str:
    return "" if value is None else f"{value:.3g}"


def build_live_panel(progress: gr.HTML) -> LivePanel:
    sampled_memory = gr.HTML(memory_chart_html(LiveCharts()), js_on_load=HOVER_JS,
                             elem_id="job-memory-plot")
    memory_comparison = gr.Markdown(elem_id="job-memory-comparison")
    # Folded away, these charts cost the browser nothing: the page holds their updates.
    with gr.Accordion("Learning rate, gradient norm, step time, MFU", open=True,
                      elem_id="job-more-charts") as more_charts:
        empty = LiveCharts()
        with gr.Row():
            learning_rate = _step_plot(LEARNING_RATE, empty.learning_rate, "job-lr-plot")
            grad_norm = _step_plot(GRAD_NORM, empty.grad_norm, "job-grad-norm-plot")
        with gr.Row():
            step_time = _step_plot(STEP_SECONDS, empty.step_time, "job-step-time-plot")
            mfu = _step_plot(MFU, empty.mfu, "job-mfu-plot", visible=False)
    return LivePanel(progress, sampled_memory, memory_comparison, learning_rate, grad_norm,
                     step_time, mfu, more_charts)


def _step_plot(figure: Figure, frame: pd.DataFrame, elem_id: str, *,
               visible: bool = True) -> gr.HTML:
    return gr.HTML(step_chart_html(figure, frame), js_on_load=HOVER_JS, elem_id=elem_id,
                   visible=visible)


def memory_chart_html(live: LiveCharts) -> str:
    """A line a GPU (or a rank), the card's capacity and the planned peak dashed across."""
    lines = frame_lines(live.sampled_memory, x="seconds", y="memory_mb", series="series",
                        kinds={CAPACITY_SERIES: "reference", PLANNED_SERIES: "reference"})
    return chart_html(lines, Axes(live.sampled_memory_title, x_title=MEMORY_X_TITLE,
                                  y_title="MiB", height=PLOT_HEIGHT))


def step_chart_html(figure: Figure, frame: pd.DataFrame) -> str:
    return chart_html(frame_lines(frame, x="step", y=figure.field),
                      Axes(figure.title, x_title="step", y_title=figure.unit or figure.title,
                           height=PLOT_HEIGHT))


def show_live(live: LiveCharts, memory_comparison: str,
              shown: Callable[[pd.DataFrame], bool] = lambda _frame: True) -> tuple:
    """Updates in the order of `LivePanel.outputs`; `shown` says whether a chart of a
    frame is drawn (a finished job's empty charts are not)."""
    step_charts = ((LEARNING_RATE, live.learning_rate), (GRAD_NORM, live.grad_norm),
                   (STEP_SECONDS, live.step_time))
    return (
        live.progress_html,
        gr.HTML(memory_chart_html(live), visible=shown(live.sampled_memory)),
        memory_comparison,
        *(gr.HTML(step_chart_html(figure, frame), visible=shown(frame))
          for figure, frame in step_charts),
        gr.HTML(step_chart_html(MFU, live.mfu), visible=live.has_mfu),
    )
