"""`build_ui`: the TuneDeck Blocks, one tab module each, joined by "open this job"."""
from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import html  # noqa: E402

import gradio as gr  # noqa: E402

from app.auth.principal import principal_of  # noqa: E402
from app.ui.page_chrome import NAME_JOB_IN_ADDRESS_JS, job_in_address  # noqa: E402
from app.ui.compare_handlers import pickable_jobs  # noqa: E402
from app.ui.tabs.cluster import build_cluster_tab  # noqa: E402
from app.ui.tabs.compare import build_compare_tab  # noqa: E402
from app.ui.tabs.job_page import build_job_page_tab  # noqa: E402
from app.ui.tabs.jobs import build_jobs_tab  # noqa: E402
from app.ui.tabs.new_job import build_new_job_tab  # noqa: E402
from tunedeck.settings import Settings, load_settings  # noqa: E402

NEW_JOB_TAB = "new-job"
JOBS_TAB = "jobs"
JOB_TAB = "job"
COMPARE_TAB = "compare"
CLUSTER_TAB = "cluster"
DEFAULT_WORKER_LOST_SECONDS = Settings.model_fields["worker_lost_seconds"].default


def build_ui(*, database, celery_app,
             worker_lost_seconds: float = DEFAULT_WORKER_LOST_SECONDS,
             settings: Settings | None = None) -> gr.Blocks:
    """The whole UI. Nothing here is shared between browsers but the database and broker.
    `settings` (default: the environment's) say which local paths a job may read."""
    settings = settings or load_settings()
    with gr.Blocks(title="TuneDeck", analytics_enabled=False) as blocks:
        gr.Markdown("# TuneDeck\nLaunch LoRA and full fine-tunes on DeepSpeed ZeRO-2 or "
                    "PyTorch FSDP, watch loss, throughput and memory live, and download the "
                    "merged weights.")
        account = gr.HTML(elem_id="account")
        with gr.Tabs(selected=NEW_JOB_TAB, elem_id="tabs") as tabs:
            with gr.Tab("New job", id=NEW_JOB_TAB, elem_id="tab-new-job") as new_job_tab:
                new_job = build_new_job_tab(database=database, celery_app=celery_app,
                                            settings=settings)
            with gr.Tab("Jobs", id=JOBS_TAB, elem_id="tab-jobs") as jobs_tab:
                jobs = build_jobs_tab(database=database, worker_lost_seconds=worker_lost_seconds,
                                      settings=settings)
            with gr.Tab("Job", id=JOB_TAB, elem_id="tab-job") as job_tab:
                job_page = build_job_page_tab(database=database, celery_app=celery_app,
                                              settings=settings, tab=job_tab)
            with gr.Tab("Compare", id=COMPARE_TAB, elem_id="tab-compare") as compare_tab:
                compare = build_compare_tab(database=database)
            with gr.Tab("Cluster", id=CLUSTER_TAB, elem_id="tab-cluster") as cluster_tab:
                build_cluster_tab(database=database, worker_lost_seconds=worker_lost_seconds)
        # The job page draws nothing while another tab is shown (see build_job_page_tab).
        for other_tab in (new_job_tab, jobs_tab, compare_tab, cluster_tab):
            other_tab.select(lambda: False, None, job_page.looking, show_progress="hidden")
        opening = [job_page.job_id, tabs, job_page.looking]
        new_job.submitted.then(open_job, new_job.submitted_job_id, opening,
                               show_progress="hidden")
        jobs.selected.then(open_job, jobs.selected_job_id, opening, show_progress="hidden")

        def open_compare(job_ids: list[int] | None, request: gr.Request):
            if not job_ids:
                return gr.skip(), gr.skip(), gr.skip(), gr.skip()
            choices = pickable_jobs(database=database, principal=principal_of(request))
            return (gr.Dropdown(choices=choices, value=job_ids),
                    ", ".join(map(str, job_ids)), gr.Tabs(selected=COMPARE_TAB), False)

        jobs.compared.then(open_compare, jobs.compare_ids,
                           [compare.picker, compare.job_ids, tabs, job_page.looking],
                           show_progress="hidden").then(
            compare.show, compare.job_ids, compare.outputs, show_progress="hidden")
        blocks.load(account_line, None, account, show_progress="hidden")
        blocks.load(open_job_in_address, None, opening, show_progress="hidden")
        job_page.opened.then(None, job_page.job_id, None, js=NAME_JOB_IN_ADDRESS_JS)
        job_page.backends_compared.then(fill_compare_ids, job_page.compared_job_ids,
                                        compare.job_ids, show_progress="hidden")
    return blocks


def account_line(request: gr.Request) -> str:
    """Who this page acts for, and how to sign out; or that nobody needs to sign in.
    HTML, not Markdown: Gradio opens Markdown links in a new tab, and sign-out must not."""
    principal = principal_of(request)
    if principal.open_access:
        return ("<p><strong>Open access</strong>: no accounts exist, so anyone who can reach "
                "this machine's loopback address may use TuneDeck. Create one with "
                "<code>tunedeck user add NAME --admin</code> to require sign-in.</p>")
    role = "admin" if principal.is_admin else "user"
    return (f"<p>Signed in as <strong>{html.escape(principal.name)}</strong> ({role}) · "
            '<a href="/logout" id="sign-out" target="_self">Sign out</a></p>')


def open_job(job_id: int | None):
    """Show the Job tab on `job_id` (and say it is the one in view); nothing changes when
    there is no job to show."""
    if job_id is None:
        return gr.skip(), gr.skip(), gr.skip()
    return job_id, gr.Tabs(selected=JOB_TAB), True


def open_job_in_address(request: gr.Request):
    """A page opened at `/?job=ID` shows that job's page."""
    return open_job(job_in_address(request.query_params))


def fill_compare_ids(job_ids: str | None):
    """Put the jobs "Compare backends" started into the Compare tab (it stays where it is)."""
    return job_ids if job_ids else gr.skip()
