"""The "Jobs" tab: every job, refreshed every couple of seconds, filtered by status, owner
and model; click a row (or its id, a link to the job's own address) to open it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.auth.principal import principal_of
from app.ui import job_removal_handlers as removal, jobs_table
from app.ui.compare_handlers import pickable_jobs
from app.ui.job_ids import job_id_from_row
from app.ui.jobs_table import ANY, STATUS_CHOICES, JobsFilter

REFRESH_SECONDS = 2.0


@dataclass(frozen=True)
class JobsTab:
    selected: Any  # the row-select event, for build_ui to chain "open the job" onto
    selected_job_id: gr.State
    compared: Any  # "Compare selected" pressed, for build_ui to open the Compare tab on
    compare_ids: gr.State  # the ids to compare, or None when they were refused


def _build_removal_row(*, database, settings) -> list[Any]:
    """Archive, unarchive, delete or compare the jobs picked (or whose ids are typed); Delete
    only arms a Confirm button naming what goes. The events after which the table refreshes, the
    "Compare selected" event and the ids it passes on."""
    with gr.Row(elem_id="jobs-actions"):
        # Picked from a list (the jobs the user may see, newest first) or typed: the picks
        # become the ids the buttons act on.
        picker = gr.Dropdown([], multiselect=True, label="Select jobs", scale=3,
                             info="pick from your jobs, newest first", elem_id="jobs-select")
        ids = gr.Textbox(label="Job ids (for archive / delete)", placeholder="e.g. 3, 5",
                         info="or type them", scale=2, elem_id="jobs-action-ids")
    with gr.Row(elem_id="jobs-buttons"):
        archive = gr.Button("Archive", size="sm", scale=1, elem_id="jobs-archive")
        unarchive = gr.Button("Unarchive", size="sm", scale=1, elem_id="jobs-unarchive")
        delete = gr.Button("Delete…", size="sm", variant="stop", scale=1, elem_id="jobs-delete")
        confirm = gr.Button("Confirm", size="sm", variant="stop", visible=False, scale=2,
                            elem_id="jobs-delete-confirm")
        cancel = gr.Button("Cancel", size="sm", visible=False, scale=1,
                           elem_id="jobs-delete-cancel")
        compare = gr.Button("Compare selected", size="sm", scale=1, elem_id="jobs-compare")
    message = gr.Markdown("", elem_id="jobs-action-message")
    compare_ids = gr.State(None)

    def offer_jobs(request: gr.Request):
        return gr.Dropdown(choices=pickable_jobs(database=database,
                                                 principal=principal_of(request)))

    picker.focus(offer_jobs, None, picker, show_progress="hidden")
    picker.input(lambda picked: ", ".join(str(job_id) for job_id in picked or ()), picker, ids,
                 show_progress="hidden")

    def to_compare(text):
        try:
            ids = removal.job_ids_of(text)
        except removal.BadIds as error:
            return None, str(error)
        if len(ids) < 2:
            return None, "Compare selected: type at least 2 job ids, e.g. 3, 5"
        return ids, ""

    compared = compare.click(to_compare, ids, [compare_ids, message], show_progress="hidden")

    def arm(text):
        try:
            label = removal.confirm_label(text)
        except removal.BadIds as error:
            return gr.Button(visible=False), gr.Button(visible=False), str(error)
        return gr.Button(label, visible=True), gr.Button(visible=True), ""

    def disarm():
        return gr.Button(visible=False), gr.Button(visible=False)

    def delete_now(text, request: gr.Request):
        return removal.delete_jobs(principal_of(request), text, database=database,
                                   settings=settings, client=_client(request))

    def archiving(archived: bool):
        def act(text, request: gr.Request):
            return removal.archive_jobs(principal_of(request), text, archived,
                                        database=database, client=_client(request))
        return act

    delete.click(arm, ids, [confirm, cancel, message], show_progress="hidden")
    cancel.click(disarm, None, [confirm, cancel], show_progress="hidden")
    deleted = confirm.click(delete_now, ids, message).then(disarm, None, [confirm, cancel])
    archived = archive.click(archiving(True), ids, message)
    unarchived = unarchive.click(archiving(False), ids, message)
    return [deleted, archived, unarchived], compared, compare_ids


def _client(request: gr.Request) -> str | None:
    return request.client.host if request and request.client else None


def build_jobs_tab(*, database, worker_lost_seconds: float, settings) -> JobsTab:
    gr.Markdown("Your jobs (an admin's: everyone's), newest first. Click a row to open the "
                "job's page; its id links the page's own address.")
    with gr.Row():
        status = gr.Dropdown(STATUS_CHOICES, value=ANY, label="Status", elem_id="jobs-status")
        owner = gr.Dropdown([ANY], value=ANY, label="Owner", allow_custom_value=True,
                            elem_id="jobs-owner")
        model = gr.Dropdown([ANY], value=ANY, label="Model (any part of it)",
                            allow_custom_value=True, elem_id="jobs-model")
        show_archived = gr.Checkbox(False, label="Show archived (only)",
                                    elem_id="jobs-show-archived")

    def refresh(status_value=None, owner_value=None, model_value=None, archived_value=False,
                request: gr.Request | None = None):
        if request is None:  # Gradio reads the value once while building: nobody asks yet
            return jobs_table.empty_jobs_table()
        return jobs_table.jobs_table(database=database, principal=principal_of(request),
                                     shown=JobsFilter.of(status_value, owner_value, model_value,
                                                         archived_value),
                                     worker_lost_seconds=worker_lost_seconds)

    def choices(request: gr.Request):
        owners, models = jobs_table.filter_choices(database=database,
                                                   principal=principal_of(request))
        return gr.Dropdown(choices=owners), gr.Dropdown(choices=models)

    # A callable value is read again on each page load, so a new browser never sees stale rows.
    table = gr.Dataframe(refresh, interactive=False, wrap=True, max_height=640,
                         datatype=jobs_table.COLUMN_TYPES,
                         column_widths=jobs_table.COLUMN_WIDTHS, elem_id="jobs-table")
    refresh_timer = gr.Timer(REFRESH_SECONDS)
    selected_job_id = gr.State(None)

    def select_row(event: gr.SelectData):
        return job_id_from_row(event.row_value)

    removal_events, compared, compare_ids = _build_removal_row(database=database,
                                                               settings=settings)
    filters = [status, owner, model, show_archived]
    refresh_timer.tick(refresh, filters, table, show_progress="hidden", concurrency_limit=None)
    for box in filters:
        box.change(refresh, filters, table, show_progress="hidden")
    owner.focus(choices, None, [owner, model], show_progress="hidden")
    model.focus(choices, None, [owner, model], show_progress="hidden")
    for done in removal_events:
        done.then(refresh, filters, table, show_progress="hidden")
    selected = table.select(select_row, None, selected_job_id, show_progress="hidden")
    return JobsTab(selected=selected, selected_job_id=selected_job_id, compared=compared,
                   compare_ids=compare_ids)
