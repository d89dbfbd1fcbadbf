"""The "Jobs" tab: every job, refreshed every couple of seconds while the tab is shown,
filtered by status, owner and model; click a row (or its id, a link to the job's own address)
to open it, or tick rows to compare, archive, unarchive or delete those jobs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from app.auth.principal import principal_of
from app.ui.jobs import jobs_table, removal_handlers as removal
from app.ui.jobs.jobs_table import ANY, STATUS_CHOICES, JobsFilter

REFRESH_SECONDS = 2.0


@dataclass(frozen=True)
class JobsTab:
    selected: Any  # a row clicked (not its tick box), for build_ui to chain "open the job" onto
    selected_job_id: gr.State
    compared: Any  # "Compare selected" pressed, for build_ui to open the Compare tab on
    compare_ids: gr.State  # the ids to compare, or None when they were refused
    refresh_timer: gr.Timer  # inactive until the tab is shown: build_ui switches it


@dataclass(frozen=True)
class JobsFilters:
    status: gr.Dropdown
    owner: gr.Dropdown
    model: gr.Dropdown
    archived: gr.Checkbox  # the archived jobs instead of the others

    @property
    def inputs(self) -> list[Any]:
        """In the order of the table refresh's (and JobsFilter.of's) arguments."""
        return [self.status, self.owner, self.model, self.archived]


@dataclass(frozen=True)
class JobsButtons:
    archive: gr.Button
    unarchive: gr.Button
    delete: gr.Button
    confirm: gr.Button  # shown by Delete, labelled with what goes
    cancel: gr.Button
    compare: gr.Button
    message: gr.Markdown


@dataclass(frozen=True)
class JobsLayout:
    filters: JobsFilters
    buttons: JobsButtons
    # The job ids ticked in this browser, in the order ticked. Kept here and changed only by
    # a click, never read back from the table: a timer refresh answered just after a click
    # draws the tick late (on the next refresh) instead of losing it.
    ticked: gr.State
    table: gr.Dataframe
    refresh_timer: gr.Timer
    selected_job_id: gr.State  # the job of the row last clicked (not on its tick box)


@dataclass(frozen=True)
class JobsActions:
    done: list[Any]  # the delete, archive and unarchive events: the table redraws after each
    compared: Any
    compare_ids: gr.State


def build_jobs_tab(*, database, worker_lost_seconds: float, settings, tab: gr.Tab) -> JobsTab:
    """`tab`: the Jobs tab itself; showing it redraws the table at once."""
    refresh = table_refresh(database=database, worker_lost_seconds=worker_lost_seconds)
    layout = lay_out_jobs_tab(refresh)
    wire_filter_choices(layout.filters, database=database)
    actions = wire_actions(layout, database=database, settings=settings)
    wire_refresh(layout, refresh, tab=tab, after=actions.done)
    selected = wire_row_selection(layout)
    return JobsTab(selected=selected, selected_job_id=layout.selected_job_id,
                   compared=actions.compared, compare_ids=actions.compare_ids,
                   refresh_timer=layout.refresh_timer)


def lay_out_jobs_tab(refresh: Callable[..., Any]) -> JobsLayout:
    """The filters, the buttons, the table (`refresh` draws it on each page load) and its
    timer."""
    gr.Markdown("Your jobs (an admin's: everyone's), newest first. Click a row to open the "
                "job's page; its id links the page's own address. Tick rows to compare, "
                "archive or delete those jobs.")
    filters = _build_filters()
    buttons = _build_buttons()
    ticked = gr.State([])
    # Not interactive: Gradio's editable checkbox cells take a first click as selecting the
    # cell (its menu button then covers the box), and every other header would show a lock.
    # A click on a tick cell is a select event instead, which toggles the job (page_chrome's
    # CSS lets the click through the read-only box). A callable value is read again on each
    # page load, so a new browser never sees stale rows.
    table = gr.Dataframe(refresh, interactive=False, wrap=True, max_height=640,
                         **jobs_table.table_layout(jobs_table.empty_jobs_table()),
                         elem_id="jobs-table")
    # A hidden table redrawn every tick still costs the browser a re-render: the timer runs
    # only while the tab is shown (build_ui turns it on and off as tabs are selected, and
    # renders it outside the tabs: one inside a tab not yet drawn misses its switching on).
    refresh_timer = gr.Timer(REFRESH_SECONDS, active=False, render=False)
    selected_job_id = gr.State(None)
    return JobsLayout(filters, buttons, ticked, table, refresh_timer, selected_job_id)


def _build_filters() -> JobsFilters:
    with gr.Row():
        status = gr.Dropdown(STATUS_CHOICES, value=ANY, label="Status", elem_id="jobs-status")
        owner = gr.Dropdown([ANY], value=ANY, label="Owner", allow_custom_value=True,
                            elem_id="jobs-owner")
        model = gr.Dropdown([ANY], value=ANY, label="Model (any part of it)",
                            allow_custom_value=True, elem_id="jobs-model")
        show_archived = gr.Checkbox(False, label="Show archived (only)",
                                    elem_id="jobs-show-archived")
    return JobsFilters(status, owner, model, show_archived)


def _build_buttons() -> JobsButtons:
    """The row above the table (nearer than below a 640 px table) of what the ticks are for."""
    with gr.Row(elem_id="jobs-buttons"):
        compare = gr.Button("Compare selected", size="sm", scale=1, elem_id="jobs-compare")
        archive = gr.Button("Archive", size="sm", scale=1, elem_id="jobs-archive")
        unarchive = gr.Button("Unarchive", size="sm", scale=1, elem_id="jobs-unarchive")
        delete = gr.Button("Delete…", size="sm", variant="stop", scale=1, elem_id="jobs-delete")
        confirm = gr.Button("Confirm", size="sm", variant="stop", visible=False, scale=2,
                            elem_id="jobs-delete-confirm")
        cancel = gr.Button("Cancel", size="sm", visible=False, scale=1,
                           elem_id="jobs-delete-cancel")
    message = gr.Markdown("", elem_id="jobs-action-message")
    return JobsButtons(archive, unarchive, delete, confirm, cancel, compare, message)


def table_refresh(*, database, worker_lost_seconds: float) -> Callable[..., Any]:
    """The table's redraw: the jobs the filters pass, with this browser's ticks."""
    def refresh(status_value=None, owner_value=None, model_value=None, archived_value=False,
                ticks=None, request: gr.Request | None = None):
        if request is None:  # Gradio reads the value once while building: nobody asks yet
            return jobs_table.empty_jobs_table()
        rows = jobs_table.jobs_table(database=database, principal=principal_of(request),
                                     shown=JobsFilter.of(status_value, owner_value, model_value,
                                                         archived_value),
                                     worker_lost_seconds=worker_lost_seconds)
        table = jobs_table.with_ticks(rows, ticks or [])
        return gr.Dataframe(table, **jobs_table.table_layout(table))
    return refresh


def wire_filter_choices(filters: JobsFilters, *, database) -> None:
    """Opening the owner or model list offers the owners and models of the jobs one sees."""
    def choices(request: gr.Request):
        owners, models = jobs_table.filter_choices(database=database,
                                                   principal=principal_of(request))
        return gr.Dropdown(choices=owners), gr.Dropdown(choices=models)

    filters.owner.focus(choices, None, [filters.owner, filters.model], show_progress="hidden")
    filters.model.focus(choices, None, [filters.owner, filters.model], show_progress="hidden")


def wire_actions(layout: JobsLayout, *, database, settings) -> JobsActions:
    """Each button acts on the jobs ticked in the table and says what it did (or why not);
    "Compare selected" passes them on, for build_ui to open the Compare tab on."""
    compare_ids = gr.State(None)

    def to_compare(frame, ticks):
        return removal.to_compare(jobs_table.ticked_jobs(frame, ticks))

    compared = layout.buttons.compare.click(to_compare, [layout.table, layout.ticked],
                                            [compare_ids, layout.buttons.message],
                                            show_progress="hidden")
    deleted = _wire_delete(layout, database=database, settings=settings)
    archived, unarchived = _wire_archiving(layout, database=database)
    return JobsActions(done=[deleted, archived, unarchived], compared=compared,
                       compare_ids=compare_ids)


def _wire_delete(layout: JobsLayout, *, database, settings) -> Any:
    """Delete only arms a Confirm button naming what goes, and Confirm deletes exactly those
    (a tick added meanwhile is not). Returns the event after which the deletion is done."""
    buttons = layout.buttons
    doomed = gr.State([])  # what the shown Confirm button names

    def arm(frame, ticks):
        job_ids = jobs_table.ticked_jobs(frame, ticks)
        try:
            label = removal.confirm_label(job_ids)
        except removal.NothingToActOn as error:
            return gr.Button(visible=False), gr.Button(visible=False), str(error), []
        return gr.Button(label, visible=True), gr.Button(visible=True), "", job_ids

    def disarm():
        return gr.Button(visible=False), gr.Button(visible=False), []

    def delete_now(job_ids, ticks, request: gr.Request):
        message = removal.delete_jobs(principal_of(request), job_ids, database=database,
                                      settings=settings, client=_client(request))
        return message, _unticked(ticks, job_ids)

    confirming = [buttons.confirm, buttons.cancel]
    buttons.delete.click(arm, [layout.table, layout.ticked],
                         [*confirming, buttons.message, doomed], show_progress="hidden")
    buttons.cancel.click(disarm, None, [*confirming, doomed], show_progress="hidden")
    return buttons.confirm.click(delete_now, [doomed, layout.ticked],
                                 [buttons.message, layout.ticked]) \
        .then(disarm, None, [*confirming, doomed])


def _wire_archiving(layout: JobsLayout, *, database) -> tuple[Any, Any]:
    """Archive and Unarchive act on the ticked jobs at once. Returns their two events."""
    def archiving(archived: bool):
        def act(frame, ticks, request: gr.Request):
            job_ids = jobs_table.ticked_jobs(frame, ticks)
            message = removal.archive_jobs(principal_of(request), job_ids, archived,
                                           database=database, client=_client(request))
            return message, _unticked(ticks, job_ids)
        return act

    shown, outputs = [layout.table, layout.ticked], [layout.buttons.message, layout.ticked]
    return (layout.buttons.archive.click(archiving(True), shown, outputs),
            layout.buttons.unarchive.click(archiving(False), shown, outputs))


def wire_refresh(layout: JobsLayout, refresh: Callable[..., Any], *, tab: gr.Tab,
                 after: list[Any]) -> None:
    """The table redraws on each tick, on a filter's change, as the tab is shown and after
    each event in `after`."""
    inputs = [*layout.filters.inputs, layout.ticked]
    layout.refresh_timer.tick(refresh, inputs, layout.table, show_progress="hidden",
                              concurrency_limit=None)
    for box in layout.filters.inputs:
        box.change(refresh, inputs, layout.table, show_progress="hidden")
    tab.select(refresh, inputs, layout.table, show_progress="hidden")
    for done in after:
        done.then(refresh, inputs, layout.table, show_progress="hidden")


def wire_row_selection(layout: JobsLayout) -> Any:
    """A tick cell toggles its job; any other cell opens it. Returns the select event."""
    def select_cell(frame, ticks, event: gr.SelectData):
        job_id = jobs_table.row_job_id(event.row_value)
        if event.index[1] != jobs_table.TICK_COLUMN or job_id is None:
            return gr.skip(), gr.skip(), job_id
        ticks = jobs_table.toggled(ticks, job_id)
        return jobs_table.with_ticks(frame, ticks), ticks, None

    return layout.table.select(select_cell, [layout.table, layout.ticked],
                               [layout.table, layout.ticked, layout.selected_job_id],
                               show_progress="hidden")


def _unticked(ticks: list[int], acted_on: list[int]) -> list[int]:
    """The ticks left once a button acted: done with (or refused, and said so), each job
    acted on is unticked, so an archived job shown again is not still picked."""
    return [job_id for job_id in ticks if job_id not in acted_on]


def _client(request: gr.Request) -> str | None:
    return request.client.host if request and request.client else None
