"""The Job tab's components, and one job's page (job_handlers.JobPage) as their updates:
the job id and its buttons, the headline, a failure's panel, the progress and downloads,
then what only a job has (charts, Try it, live signals, log, events, config, checkpoints).
job_page_tab.py wires them."""
from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr

from app.ui.charts.page_assets import HOVER_JS
from app.ui.job_page import job_handlers, step_charts
from app.ui.job_page.failure_panel import FailurePanel, build_failure_panel, show_failure
from app.ui.job_page.job_handlers import JobPage
from app.ui.job_page.live_panel import (LivePanel, build_live_panel, build_preference_panel,
                                        build_progress, show_live, show_preference)
from app.ui.job_page.try_it_panel import build_try_it_panel
from tunedeck.jobs.states import SUCCEEDED

REFRESH_SECONDS = 1.0
LOG_HEIGHT_PX = 320


@dataclass(frozen=True)
class JobButtons:
    """Beside the job id: what may be done with the job, and what the last press did."""
    cancel: gr.Button
    resume: gr.Button
    compare: gr.Button  # "Compare backends"
    continue_from: gr.Button  # "Continue from this job": a succeeded job's weights in the form
    confirm_row: gr.Row  # Cancel's second question: confirm_cancel or keep_running
    confirm_cancel: gr.Button
    keep_running: gr.Button
    message: gr.Markdown  # what the last press did, or why not
    resume_hint: gr.Markdown


@dataclass(frozen=True)
class JobPageLayout:
    job_id: gr.Textbox
    buttons: JobButtons
    headline: gr.Markdown
    error: gr.HTML
    failure: FailurePanel
    downloads: gr.HTML
    smoothing: gr.Slider
    log_scale: gr.Checkbox
    charts: tuple[gr.HTML, gr.HTML]  # loss, throughput
    preference: gr.HTML
    live: LivePanel
    details: tuple[gr.HTML, gr.Dataframe, gr.Code, gr.Textbox, gr.Dataframe]
    refresh_timer: gr.Timer

    @property
    def drawn(self) -> list:
        """What a refresh draws, in the order of `page_updates`."""
        return [self.headline, self.buttons.compare, self.error, self.downloads, *self.charts,
                *self.details, self.buttons.cancel, self.buttons.resume,
                self.buttons.resume_hint, self.refresh_timer, *self.failure.outputs,
                *self.live.outputs, self.preference]


def lay_out_job_page(*, database, celery_app, settings) -> JobPageLayout:
    """The tab's components, top to bottom; the Try it panel among them wires itself (hence
    the database, broker and settings)."""
    with gr.Row():
        # A text box, not a Number: Gradio draws an empty Number as 0 and sends that 0 with
        # every event (with a minimum of 1, as an error toast); parse_job_id reads the text.
        job_id = gr.Textbox(label="Job id", placeholder="a job's id, e.g. 3", max_lines=1,
                            scale=1, elem_id="job-id")
        buttons = _buttons()
    headline = gr.Markdown(job_handlers.NO_JOB_HEADLINE, elem_id="job-status",
                           elem_classes=headline_classes(None))
    # A failed job's page opens on why it failed, before anything it measured.
    error = gr.HTML(visible=False, elem_id="job-error")
    failure = build_failure_panel()
    progress = build_progress()
    downloads = gr.HTML(visible=False, elem_id="job-downloads")
    # What only a job has (charts, log, events, config): hidden until one is open, so an
    # empty tab is its headline saying how to open one, not a page of empty frames. Hidden
    # by the style sheet, from the headline's class (`headline_classes`), not by an update:
    # Gradio's front end copies a layout block that has been an event's output whole on
    # every later event, each tick of a live job included.
    with gr.Column(elem_id="job-body"):
        smoothing, log_scale = _chart_controls()
        charts = _charts()
        # A preference job's rewards, margin, accuracy, log-probs: read with the loss.
        preference = build_preference_panel()
        # Under the loss and throughput: a page still opens on its status and first charts.
        build_try_it_panel(job_id=job_id, database=database, celery_app=celery_app,
                           settings=settings)
        live = build_live_panel(progress)
        details = _details()
    refresh_timer = gr.Timer(REFRESH_SECONDS, active=False)
    return JobPageLayout(job_id, buttons, headline, error, failure, downloads, smoothing,
                         log_scale, charts, preference, live, details, refresh_timer)


def _buttons() -> JobButtons:
    with gr.Column(scale=1):
        with gr.Row():
            cancel_button = gr.Button("Cancel job", variant="stop", interactive=False,
                                      elem_id="job-cancel")
            resume_button = gr.Button("Resume from latest checkpoint", interactive=False,
                                      elem_id="job-resume")
            compare_button = gr.Button("Compare backends", interactive=False,
                                       elem_id="job-compare-backends")
            # Shown for a succeeded job only (page_chrome.CSS reads the headline's class).
            continue_button = gr.Button("Continue from this job", elem_id="job-continue")
        # Cancel asks once more: a stopped run cannot be taken back (Resume needs a
        # checkpoint, and the steps since it are lost).
        with gr.Row(visible=False, elem_id="job-cancel-confirm-row") as confirm_row:
            confirm_cancel = gr.Button("Yes, cancel it", variant="stop", size="sm",
                                       elem_id="job-cancel-confirm")
            keep_running = gr.Button("Keep it running", size="sm", elem_id="job-cancel-keep")
        cancel_message = gr.Markdown(elem_id="job-cancel-result")
        resume_hint = gr.Markdown(elem_id="job-resume-hint")
    return JobButtons(cancel_button, resume_button, compare_button, continue_button,
                      confirm_row, confirm_cancel, keep_running, cancel_message, resume_hint)


def _chart_controls() -> tuple[gr.Slider, gr.Checkbox]:
    with gr.Row():
        smoothing = gr.Slider(0.0, step_charts.MAX_SMOOTHING,
                              value=step_charts.ChartView.smoothing, step=0.01,
                              label="Smoothing (EMA of loss, throughput and a "
                              "preference job's rewards)",
                              info="0: the raw line only", scale=3, elem_id="job-smoothing")
        log_scale = gr.Checkbox(False, label="Loss on a log scale", scale=1,
                                elem_id="job-log-scale")
    return smoothing, log_scale


def _charts() -> tuple[gr.HTML, gr.HTML]:
    """Loss (training, and eval when the job has an eval set) and throughput by step."""
    with gr.Row():
        loss_plot = gr.HTML(step_charts.loss_chart_html(step_charts.loss_frame([])),
                            js_on_load=HOVER_JS, elem_id="job-loss-plot")
        throughput_plot = gr.HTML(step_charts.throughput_chart_html(
            step_charts.throughput_frame([])), js_on_load=HOVER_JS, elem_id="job-throughput-plot")
    return loss_plot, throughput_plot


def _details() -> tuple[gr.HTML, gr.Dataframe, gr.Code, gr.Textbox, gr.Dataframe]:
    """The log tail (and a link to all of it), the events, the generated config and launch
    command, the checkpoints."""
    with gr.Row():
        log_tail = gr.HTML(elem_id="job-log")
        events = gr.Dataframe(label="Events", interactive=False, wrap=True, max_height=360,
                              column_widths=["22%", "17%", "61%"], elem_id="job-events")
    with gr.Accordion("Generated config and launch command", open=False):
        config_code = gr.Code(language="json", label="Backend config", interactive=False,
                              max_lines=40, elem_id="job-config")
        command_line = gr.Textbox(label="Launch command (torchrun argv; on Slurm, sbatch and "
                                  "its script)", interactive=False, max_lines=40,
                                  elem_id="job-command")
    with gr.Accordion("Checkpoints", open=False):
        checkpoints = gr.Dataframe(label="Complete checkpoints, newest first (Resume uses the "
                                   "newest)", interactive=False, wrap=True,
                                   elem_id="job-checkpoints")
    return log_tail, events, config_code, command_line, checkpoints


def log_html(text: str, link_html: str, hidden_lines: int = 0) -> str:
    """The log's last lines in a box that stays scrolled to the newest one (a reversed
    column starts at its end, as a terminal does), and the link to the whole log. The label
    says how many lines of library warnings the box leaves out."""
    body = html.escape(text) if text else "(no log yet)"
    hidden = (f'; <span id="job-log-hidden">{hidden_lines} lines of library warnings and '
              f"progress bars left out, the full log has them</span>" if hidden_lines else "")
    return (f'<div class="job-log-label">Log (torchrun, last lines{hidden})</div>'
            f'<div class="job-log-box" style="max-height:{LOG_HEIGHT_PX}px">'
            f'<pre>{body}</pre></div>{link_html}')


def headline_classes(status: str | None) -> list[str]:
    """What the style sheet shows by (page_chrome.CSS): no job open hides the page's body,
    and only a succeeded job has the Try it panel."""
    return ["job-none" if status is None else
            "job-succeeded" if status == SUCCEEDED else "job-shown"]


def page_updates(page: JobPage) -> tuple:
    """The page as updates, in the order of `JobPageLayout.drawn`; the timer runs while the
    job does."""
    return (
        gr.Markdown(page.headline, elem_classes=headline_classes(page.status)),
        gr.Button(interactive=page.status is not None),
        gr.HTML(job_handlers.error_html(page.error), visible=bool(page.error)),
        gr.HTML(page.downloads_html, visible=bool(page.downloads_html)),
        # A finished job's chart with no point (it failed before its first step) is hidden.
        gr.HTML(step_charts.loss_chart_html(page.loss, log_scale=page.log_scale),
                visible=page.charts_shown(page.loss)),
        gr.HTML(step_charts.throughput_chart_html(page.throughput),
                visible=page.charts_shown(page.throughput)),
        log_html(page.log_tail, page.log_link_html, page.log_hidden_lines), page.events,
        page.config_json, page.command_line, page.checkpoints,
        gr.Button(interactive=page.cancellable),
        gr.Button(interactive=page.resumable),
        page.resume_hint,
        gr.Timer(active=not page.finished),
        *show_failure(page.failure),
        *show_live(page.live, page.memory_comparison, shown=page.charts_shown),
        show_preference(page.live),
    )
