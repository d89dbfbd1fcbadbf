"""The "Job" tab: one job's status, live charts, log, events, config, checkpoints, cancel,
resume, retry (after a failure), downloads and "Try it" (after a success). Its components
are laid out in job_page_layout.py; here each event is wired to its handler, and every event
that changes the page chains the page's one redraw (`page_refresh`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from app.auth.principal import principal_of
from app.ui.database_outage import answers_while_unreachable
from app.ui.job_ids import parse_job_id
from app.ui.job_page import job_actions, job_handlers, step_charts
from app.ui.job_page.job_page_layout import JobPageLayout, lay_out_job_page, page_updates
from app.ui.unchanged_updates import only_changed


@dataclass(frozen=True)
class JobPageTab:
    job_id: gr.Textbox  # set it to open a job
    opened: Any  # the page drawn for a new job id, for build_ui to put the id in the address
    backends_compared: Any  # the Compare-backends click, for build_ui to fill the Compare tab
    compared_job_ids: gr.State  # "A, B" once Compare backends started two jobs
    looking: gr.State  # whether the Job tab is the one shown: set False when another is
    continue_from: gr.Button  # "Continue from this job", for build_ui to fill the New job form


@dataclass(frozen=True)
class JobPageState:
    """This browser's values for the page."""
    compared_job_ids: gr.State
    # The job a "Cancel requested" note is about: the note goes once that job has stopped.
    cancelling: gr.State
    # What each output shows (unchanged_updates' digests), and what the user can see: a
    # tick redraws only what changed and is in view.
    sent: gr.State
    looking: gr.State
    more_charts_open: gr.State
    ticks: gr.State


@dataclass(frozen=True)
class PageRefresh:
    """The page's redraw and what it reads and writes."""
    refresh: Callable[..., tuple]
    inputs: list[Any]
    outputs: list[Any]

    def on(self, listener: Callable[..., Any], **options) -> Any:
        """Redraw on `listener` (an event listener such as `timer.tick`, or an event's
        `.then`), showing no progress."""
        return listener(self.refresh, self.inputs, self.outputs, show_progress="hidden",
                        **options)


def build_job_page_tab(*, database, celery_app, settings, tab: gr.Tab) -> JobPageTab:
    """`tab`: the Job tab itself, whose selection redraws what changed while it was hidden."""
    layout = lay_out_job_page(database=database, celery_app=celery_app, settings=settings)
    state = _page_state()
    refresh = page_refresh(layout, state, database=database)
    wire_chart_controls(layout, refresh)
    opened = wire_job_opening(layout, state, refresh)
    wire_cancel(layout, state, refresh, database=database)
    wire_resume_and_retry(layout, refresh, database=database, celery_app=celery_app)
    backends_compared = wire_compare_backends(layout, state, refresh, database=database,
                                              celery_app=celery_app)
    wire_what_is_in_view(layout, state, refresh, tab=tab)
    return JobPageTab(job_id=layout.job_id, opened=opened, backends_compared=backends_compared,
                      compared_job_ids=state.compared_job_ids, looking=state.looking,
                      continue_from=layout.buttons.continue_from)


def _page_state() -> JobPageState:
    return JobPageState(compared_job_ids=gr.State(None), cancelling=gr.State(None),
                        sent=gr.State(None), looking=gr.State(True),
                        more_charts_open=gr.State(True), ticks=gr.State(0))


def page_refresh(layout: JobPageLayout, state: JobPageState, *, database) -> PageRefresh:
    """The page redrawn: only what changed, and (while the job runs) of what is out of view
    one group a tick. Each handler acts for the signed-in user (gr.Request carries the access
    middleware's principal): another user's job is "no such job" here as in the API."""
    drawn = layout.drawn
    outputs = [*drawn, layout.buttons.message, state.cancelling, state.sent, state.ticks]
    folded = frozenset(drawn.index(chart) for chart in layout.live.folded_outputs)
    slow_groups = _slow_groups(layout, drawn)

    def refresh(selected_job_id, cancelled_job_id, smoothing_weight, log_loss, shown,
                in_view, more_open, tick, request: gr.Request):
        if not in_view:  # another tab is shown: nothing to draw, the timer keeps its pace
            return tuple(gr.skip() for _ in outputs)
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
        updates, shown = only_changed(page_updates(page), shown, held=held)
        return (*updates, *note, shown, tick + 1)

    inputs = [layout.job_id, state.cancelling, layout.smoothing, layout.log_scale, state.sent,
              state.looking, state.more_charts_open, state.ticks]
    return PageRefresh(refresh, inputs, outputs)


def _slow_groups(layout: JobPageLayout, drawn: list[Any]) -> list[frozenset[int]]:
    """The charts under the loss and throughput are below the fold at 1440 x 900: while the
    job runs, each of these groups redraws every third tick, one group a tick, so no tick
    carries all their redraws at once (a tick that did would delay the headline's update
    with them). The first group is drawn on a page's first refresh (tick 0): a preference
    job's charts come with its loss."""
    live = layout.live
    return [frozenset(drawn.index(chart) for chart in group) for group in (
        (layout.preference, live.sampled_memory, live.memory_comparison),
        (live.learning_rate, live.grad_norm), (live.step_time, live.mfu))]


def wire_chart_controls(layout: JobPageLayout, refresh: PageRefresh) -> None:
    """The charts redraw as the smoothing or the loss's scale changes."""
    for control in (layout.smoothing, layout.log_scale):
        refresh.on(control.change, trigger_mode="always_last")


def wire_job_opening(layout: JobPageLayout, state: JobPageState, refresh: PageRefresh) -> Any:
    """Another job id draws that job's page, which the timer then redraws each tick while
    the job runs (the redraw switches the timer off once the job has finished). Returns the
    event that draws a new job's page."""
    def another_job():
        # A note, or a pending Cancel, about one job is not shown on another's page.
        return "", None, gr.Row(visible=False)

    layout.job_id.change(another_job, None,
                         [layout.buttons.message, state.cancelling, layout.buttons.confirm_row],
                         show_progress="hidden")
    opened = refresh.on(layout.job_id.change, trigger_mode="always_last")
    refresh.on(layout.refresh_timer.tick, concurrency_limit=None)
    return opened


def wire_cancel(layout: JobPageLayout, state: JobPageState, refresh: PageRefresh, *,
                database) -> None:
    """Cancel asks first, naming the job; only its "Yes, cancel job N" cancels."""
    buttons = layout.buttons

    def arm_cancel(selected_job_id):
        job = parse_job_id(selected_job_id)
        if job is None:
            return gr.skip(), gr.skip()
        return gr.Row(visible=True), gr.Button(f"Yes, cancel job {job}")

    def cancel(selected_job_id, request: gr.Request):
        message = job_actions.cancel_from_page(selected_job_id, database=database,
                                               principal=principal_of(request))
        return message, parse_job_id(selected_job_id)

    buttons.cancel.click(arm_cancel, layout.job_id, [buttons.confirm_row, buttons.confirm_cancel],
                         show_progress="hidden")
    buttons.keep_running.click(lambda: gr.Row(visible=False), None, buttons.confirm_row,
                               show_progress="hidden")
    cancelled = buttons.confirm_cancel.click(lambda: gr.Row(visible=False), None,
                                             buttons.confirm_row, show_progress="hidden").then(
        cancel, layout.job_id, [buttons.message, state.cancelling])
    refresh.on(cancelled.then)


def wire_resume_and_retry(layout: JobPageLayout, refresh: PageRefresh, *, database,
                          celery_app) -> None:
    """Resume (a failed or cancelled job with a checkpoint) and "Retry with…" (a failed
    job) say what they did; the page redraws after each."""
    def resume(selected_job_id, request: gr.Request):
        return job_actions.resume_from_page(selected_job_id, database=database,
                                            celery_app=celery_app, principal=principal_of(request))

    def retry(selected_job_id, request: gr.Request):
        return job_actions.retry_from_page(selected_job_id, database=database,
                                           celery_app=celery_app, principal=principal_of(request))

    refresh.on(layout.buttons.resume.click(resume, layout.job_id, layout.buttons.message).then)
    refresh.on(layout.failure.retry_button.click(retry, layout.job_id,
                                                 layout.buttons.message).then)


def wire_compare_backends(layout: JobPageLayout, state: JobPageState, refresh: PageRefresh, *,
                          database, celery_app) -> Any:
    """"Compare backends" starts the job's ZeRO-2 and FSDP copies. Returns its event, for
    build_ui to open the Compare tab on the two (state.compared_job_ids)."""
    # No ids while the database is unreachable: build_ui opens Compare on the ids given.
    @answers_while_unreachable(lambda: (gr.skip(), None))
    def compare_backends(selected_job_id, request: gr.Request):
        return job_actions.compare_backends_from_page(
            selected_job_id, database=database, celery_app=celery_app,
            principal=principal_of(request))

    backends_compared = layout.buttons.compare.click(
        compare_backends, layout.job_id, [layout.buttons.message, state.compared_job_ids])
    refresh.on(backends_compared.then)  # the event it adds to this job's events
    return backends_compared


def wire_what_is_in_view(layout: JobPageLayout, state: JobPageState, refresh: PageRefresh, *,
                         tab: gr.Tab) -> None:
    """What a redraw may skip: the charts folded away after the memory chart, and the whole
    page while another tab is shown (build_ui sets `looking` False then). Unfolding them, or
    showing the tab, draws what changed meanwhile."""
    more_charts = layout.live.more_charts
    for folding, is_open in ((more_charts.expand, True), (more_charts.collapse, False)):
        refresh.on(folding(lambda is_open=is_open: is_open, None, state.more_charts_open,
                           show_progress="hidden").then)
    refresh.on(tab.select(lambda: True, None, state.looking, show_progress="hidden").then)
