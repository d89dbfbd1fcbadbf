"""The "Job" tab: one job's status, live charts, log, events, config, checkpoints, cancel,
resume, retry (after a failure), downloads and "Try it" (after a success)."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.auth.principal import principal_of
from app.ui.database_outage import answers_while_unreachable
from app.ui.job_ids import parse_job_id
from app.ui.job_page import job_actions, job_handlers, step_charts
from app.ui.job_page.job_handlers import JobPage
from app.ui.charts.page_assets import HOVER_JS
from app.ui.job_page.failure_panel import build_failure_panel, show_failure
from app.ui.job_page.live_panel import (build_live_panel, build_preference_panel,
                                        build_progress, show_live, show_preference)
from app.ui.job_page.try_it_panel import build_try_it_panel
from tunedeck.jobs.states import SUCCEEDED
from app.ui.unchanged_updates import only_changed

REFRESH_SECONDS = 1.0
# The charts under the loss and throughput are below the fold at 1440 x 900: while the job
# runs, each of these groups redraws every third tick, one group a tick, so no tick carries
# all their redraws at once (a tick that did would delay the headline's update with them).


@dataclass(frozen=True)
class JobPageTab:
    job_id: gr.Textbox  # set it to open a job
    opened: Any  # the page drawn for a new job id, for build_ui to put the id in the address
    backends_compared: Any  # the Compare-backends click, for build_ui to fill the Compare tab
    compared_job_ids: gr.State  # "A, B" once Compare backends started two jobs
    looking: gr.State  # whether the Job tab is the one shown: set False when another is


def build_job_page_tab(*, database, celery_app, settings, tab: gr.Tab) -> JobPageTab:
    """`tab`: the Job tab itself, whose selection redraws what changed while it was hidden."""
    with gr.Row():
        # A text box, not a Number: Gradio draws an empty Number as 0 and sends that 0 with
        # every event (with a minimum of 1, as an error toast); parse_job_id reads the text.
        job_id = gr.Textbox(label="Job id", placeholder="a job's id, e.g. 3", max_lines=1,
                            scale=1, elem_id="job-id")
        with gr.Column(scale=1):
            with gr.Row():
                cancel_button = gr.Button("Cancel job", variant="stop", interactive=False,
                                          elem_id="job-cancel")
                resume_button = gr.Button("Resume from latest checkpoint", interactive=False,
                                          elem_id="job-resume")
                compare_button = gr.Button("Compare backends", interactive=False,
                                           elem_id="job-compare-backends")
            # Cancel asks once more: a stopped run cannot be taken back (Resume needs a
            # checkpoint, and the steps since it are lost).
            with gr.Row(visible=False, elem_id="job-cancel-confirm-row") as confirm_row:
                confirm_cancel = gr.Button("Yes, cancel it", variant="stop", size="sm",
                                           elem_id="job-cancel-confirm")
                keep_running = gr.Button("Keep it running", size="sm", elem_id="job-cancel-keep")
            cancel_message = gr.Markdown(elem_id="job-cancel-result")
            resume_hint = gr.Markdown(elem_id="job-resume-hint")
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
        with gr.Row():
            smoothing = gr.Slider(0.0, step_charts.MAX_SMOOTHING,
                                  value=step_charts.ChartView.smoothing, step=0.01,
                                  label="Smoothing (EMA of loss, throughput and a "
                                  "preference job's rewards)",
                                  info="0: the raw line only", scale=3, elem_id="job-smoothing")
            log_scale = gr.Checkbox(False, label="Loss on a log scale", scale=1,
                                    elem_id="job-log-scale")
        charts = _charts()
        # A preference job's rewards, margin, accuracy, log-probs: read with the loss.
        preference = build_preference_panel()
        # Under the loss and throughput: a page still opens on its status and first charts.
        try_it = build_try_it_panel(job_id=job_id, database=database, celery_app=celery_app,
                                    settings=settings)
        live = build_live_panel(progress)
        details = _details()
    refresh_timer = gr.Timer(REFRESH_SECONDS, active=False)
    compared_job_ids = gr.State(None)
    # The job a "Cancel requested" note is about: the note goes once that job has stopped.
    cancelling = gr.State(None)
    # What each output shows (unchanged_updates' digests), and what the user can see: a
    # tick redraws only what changed and is in view.
    sent = gr.State(None)
    looking = gr.State(True)
    more_charts_open = gr.State(True)
    ticks = gr.State(0)

    outputs = [headline, compare_button, error, downloads, *charts, *details, cancel_button,
               resume_button, resume_hint, refresh_timer, *failure.outputs, *live.outputs,
               preference]
    folded = frozenset(outputs.index(chart) for chart in live.folded_outputs)
    # The first group is drawn on a page's first refresh (tick 0): a preference job's charts
    # come with its loss.
    slow_groups = [frozenset(outputs.index(chart) for chart in group) for group in (
        (preference, live.sampled_memory, live.memory_comparison),
        (live.learning_rate, live.grad_norm), (live.step_time, live.mfu))]

    # Each handler acts for the signed-in user (gr.Request carries the access middleware's
    # principal): another user's job is "no such job" here as in the API.
    def refresh(selected_job_id, cancelled_job_id, smoothing_weight, log_loss, shown,
                in_view, more_open, tick, request: gr.Request):
        if not in_view:  # another tab is shown: nothing to draw, the timer keeps its pace
            return (*(gr.skip() for _ in outputs), gr.skip(), gr.skip(), shown, tick)
        page = job_handlers.load_job_page(selected_job_id, database=database,
                                          principal=principal_of(request),
                                          view=step_charts.ChartView.of(smoothing_weight,
                                                                         log_loss))
        stopped = cancelled_job_id is not None and page.job_id == cancelled_job_id \
            and page.finished
        note = ("", None) if stopped else (gr.skip(), gr.skip())
        held = frozenset() if more_open else folded
        if not page.finished:
            held |= frozenset().union(*(group for index, group in enumerate(slow_groups)
                                        if index != tick % len(slow_groups)))
        updates, shown = only_changed(_show(page), shown, held=held)
        return (*updates, *note, shown, tick + 1)

    def cancel(selected_job_id, request: gr.Request):
        message = job_actions.cancel_from_page(selected_job_id, database=database,
                                               principal=principal_of(request))
        return message, parse_job_id(selected_job_id)

    def another_job():
        # A note, or a pending Cancel, about one job is not shown on another's page.
        return "", None, gr.Row(visible=False)

    def arm_cancel(selected_job_id):
        job = parse_job_id(selected_job_id)
        if job is None:
            return gr.skip(), gr.skip()
        return gr.Row(visible=True), gr.Button(f"Yes, cancel job {job}")

    def resume(selected_job_id, request: gr.Request):
        return job_actions.resume_from_page(selected_job_id, database=database,
                                            celery_app=celery_app, principal=principal_of(request))

    def retry(selected_job_id, request: gr.Request):
        return job_actions.retry_from_page(selected_job_id, database=database,
                                           celery_app=celery_app, principal=principal_of(request))

    # No ids while the database is unreachable: build_ui opens Compare on the ids given.
    @answers_while_unreachable(lambda: (gr.skip(), None))
    def compare_backends(selected_job_id, request: gr.Request):
        return job_actions.compare_backends_from_page(
            selected_job_id, database=database, celery_app=celery_app,
            principal=principal_of(request))

    inputs = [job_id, cancelling, smoothing, log_scale, sent, looking, more_charts_open, ticks]
    outputs = [*outputs, cancel_message, cancelling, sent, ticks]
    for control in (smoothing, log_scale):
        control.change(refresh, inputs, outputs, show_progress="hidden",
                       trigger_mode="always_last")
    job_id.change(another_job, None, [cancel_message, cancelling, confirm_row],
                  show_progress="hidden")
    opened = job_id.change(refresh, inputs, outputs, show_progress="hidden",
                           trigger_mode="always_last")
    refresh_timer.tick(refresh, inputs, outputs, show_progress="hidden", concurrency_limit=None)
    cancel_button.click(arm_cancel, job_id, [confirm_row, confirm_cancel],
                        show_progress="hidden")
    keep_running.click(lambda: gr.Row(visible=False), None, confirm_row, show_progress="hidden")
    confirm_cancel.click(lambda: gr.Row(visible=False), None, confirm_row,
                         show_progress="hidden").then(
        cancel, job_id, [cancel_message, cancelling]).then(
        refresh, inputs, outputs, show_progress="hidden")
    resume_button.click(resume, job_id, cancel_message).then(refresh, inputs, outputs,
                                                             show_progress="hidden")
    failure.retry_button.click(retry, job_id, cancel_message).then(refresh, inputs, outputs,
                                                                   show_progress="hidden")
    backends_compared = compare_button.click(compare_backends, job_id,
                                             [cancel_message, compared_job_ids])
    backends_compared.then(refresh, inputs, outputs, show_progress="hidden")  # its new event
    for folding, is_open in ((live.more_charts.expand, True), (live.more_charts.collapse, False)):
        folding(lambda is_open=is_open: is_open, None, more_charts_open,
                show_progress="hidden").then(refresh, inputs, outputs, show_progress="hidden")
    tab.select(lambda: True, None, looking, show_progress="hidden").then(
        refresh, inputs, outputs, show_progress="hidden")
    return JobPageTab(job_id=job_id, opened=opened, backends_compared=backends_compared,
                      compared_job_ids=compared_job_ids, looking=looking)


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


LOG_HEIGHT_PX = 320


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


def _show(page: JobPage) -> tuple:
    """The page as updates, in the order of the tab's outputs; the timer runs while the job does."""
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
