"""The job page's failure panel: why the job failed, the log of the rank that failed first,
and the "Retry with…" button, whose label names the change."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from app.views.failure import FailureView, failure_html


@dataclass(frozen=True)
class FailurePanel:
    reason: gr.HTML
    rank_log: gr.Textbox
    retry_button: gr.Button

    @property
    def outputs(self) -> list:
        return [self.reason, self.rank_log, self.retry_button]


def build_failure_panel() -> FailurePanel:
    reason = gr.HTML(visible=False, elem_id="job-failure-reason")
    rank_log = gr.Textbox(label="Log of the rank that failed first (last lines)", lines=10,
                          max_lines=30, interactive=False, visible=False, autoscroll=True,
                          elem_id="job-failed-rank-log")
    retry_button = gr.Button("Retry with…", visible=False, elem_id="job-retry")
    return FailurePanel(reason, rank_log, retry_button)


def show_failure(view: FailureView) -> tuple:
    """Updates in the order of `FailurePanel.outputs`."""
    return (
        gr.HTML(failure_html(view), visible=bool(view.reason)),
        gr.Textbox(view.rank_log, visible=bool(view.rank_log)),
        gr.Button(view.retry_label or "Retry with…", visible=view.retryable),
    )
