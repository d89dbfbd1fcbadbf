"""The "Jobs" tab: every job, refreshed every couple of seconds; click a row to open it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.auth.principal import principal_of
from app.ui import job_handlers

REFRESH_SECONDS = 2.0


@dataclass(frozen=True)
class JobsTab:
    selected: Any  # the row-select event, for build_ui to chain "open the job" onto
    selected_job_id: gr.State


def build_jobs_tab(*, database) -> JobsTab:
    gr.Markdown("Your jobs (an admin's: everyone's), newest first. Click a row to open the "
                "job's page.")

    def refresh(request: gr.Request | None = None):
        if request is None:  # Gradio reads the value once while building: nobody asks yet
            return job_handlers.empty_jobs_table()
        return job_handlers.jobs_table(database=database, principal=principal_of(request))

    # A callable value is read again on each page load, so a new browser never sees stale rows.
    table = gr.Dataframe(refresh, interactive=False, wrap=True, max_height=640,
                         elem_id="jobs-table")
    refresh_timer = gr.Timer(REFRESH_SECONDS)
    selected_job_id = gr.State(None)

    def select_row(event: gr.SelectData):
        return job_handlers.job_id_from_row(event.row_value)

    refresh_timer.tick(refresh, None, table, show_progress="hidden", concurrency_limit=None)
    selected = table.select(select_row, None, selected_job_id, show_progress="hidden")
    return JobsTab(selected=selected, selected_job_id=selected_job_id)
