"""`build_ui`: the TuneDeck Blocks, one tab module each, joined by "open this job"."""
from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import html  # noqa: E402
from functools import partial  # noqa: E402

import gradio as gr  # noqa: E402

from app.auth.principal import principal_of  # noqa: E402
from app.ui.page_chrome import (NAME_JOB_IN_ADDRESS_JS, SHOW_TAB_JS,  # noqa: E402
                                job_in_address)
from app.ui.compare.compare_handlers import pickable_jobs  # noqa: E402
from app.ui.database_banner import build_database_banner  # noqa: E402
from app.ui.database_outage import (answers_while_unreachable,  # noqa: E402
                                    wait_out_database_outages)
from app.ui.cluster.cluster_tab import build_cluster_tab  # noqa: E402
from app.ui.job_ids import parse_job_id  # noqa: E402
from app.ui.compare.compare_tab import build_compare_tab  # noqa: E402
from app.ui.job_page.job_page_tab import build_job_page_tab  # noqa: E402
from app.ui.jobs.jobs_tab import build_jobs_tab  # noqa: E402
from app.ui.new_job.tab import build_new_job_tab  # noqa: E402
from tunedeck.settings import Settings, load_settings  # noqa: E402

NEW_JOB_TAB = "new-job"
JOBS_TAB = "jobs"
JOB_TAB = "job"
COMPARE_TAB = "compare"
CLUSTER_TAB = "cluster"
NEW_JOB_TAB_LABEL, JOB_TAB_LABEL, COMPARE_TAB_LABEL = "New job", "Job", "Compare"
# Scripts drive TuneDeck through its REST API, whose docs are served by this same server.
TO_TOP_JS = "() => window.scrollTo({top: 0})"
REST_API_LINK = '<a href="/docs" id="rest-api-docs" target="_blank">REST API docs</a>'
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
        build_database_banner(database=database)
        with gr.Tabs(selected=NEW_JOB_TAB, elem_id="tabs"):
            with gr.Tab(NEW_JOB_TAB_LABEL, id=NEW_JOB_TAB, elem_id="tab-new-job") as new_job_tab:
                new_job = build_new_job_tab(database=database, celery_app=celery_app,
                                            settings=settings)
            with gr.Tab("Jobs", id=JOBS_TAB, elem_id="tab-jobs") as jobs_tab:
                jobs = build_jobs_tab(database=database, worker_lost_seconds=worker_lost_seconds,
                                      settings=settings, tab=jobs_tab)
            with gr.Tab(JOB_TAB_LABEL, id=JOB_TAB, elem_id="tab-job") as job_tab:
                job_page = build_job_page_tab(database=database, celery_app=celery_app,
                                              settings=settings, tab=job_tab)
            with gr.Tab(COMPARE_TAB_LABEL, id=COMPARE_TAB, elem_id="tab-compare") as compare_tab:
                compare = build_compare_tab(database=database)
            with gr.Tab("Cluster", id=CLUSTER_TAB, elem_id="tab-cluster") as cluster_tab:
                cluster_timer = build_cluster_tab(database=database,
                                                  worker_lost_seconds=worker_lost_seconds,
                                                  tab=cluster_tab)
        # The job page draws nothing while another tab is shown (see build_job_page_tab).
        for other_tab in (new_job_tab, jobs_tab, compare_tab, cluster_tab):
            other_tab.select(lambda: False, None, job_page.looking, show_progress="hidden")
        # The Jobs, Compare and Cluster tabs refresh only while shown (Compare only while a
        # compared job runs, too: its comparison switches its timer off once none does).
        # Tab.select also fires when a handler has a tab shown (SHOW_TAB_JS clicks it).
        own_timers = {jobs_tab: jobs.refresh_timer, compare_tab: compare.refresh_timer,
                      cluster_tab: cluster_timer}
        for timer in own_timers.values():
            timer.render()  # outside the tabs: drawn from the start, so it can be switched on
        for shown_tab in (new_job_tab, jobs_tab, job_tab, compare_tab, cluster_tab):
            shown_tab.select(partial(timers_while_shown, shown_tab, tuple(own_timers)), None,
                             list(own_timers.values()), show_progress="hidden")
        # The tab a handler wants shown, by its label ("" for none): the browser shows it
        # (SHOW_TAB_JS says why a handler does not).
        tab_to_show = gr.Textbox(visible=False, elem_id="tab-to-show")
        opening = [job_page.job_id, job_page.looking, tab_to_show]
        # A job opens at the top of its page (its status), wherever the click was.
        for submitted_or_picked, picked_job_id in ((new_job.submitted, new_job.submitted_job_id),
                                                   (jobs.selected, jobs.selected_job_id)):
            submitted_or_picked.then(open_job, picked_job_id, opening, show_progress="hidden") \
                .then(None, tab_to_show, None, js=SHOW_TAB_JS).then(None, js=TO_TOP_JS)

        @answers_while_unreachable(nothing_to_compare)
        def open_compare(job_ids: list[int] | None, request: gr.Request):
            if not job_ids:
                return nothing_to_compare()
            choices = pickable_jobs(database=database, principal=principal_of(request))
            return (gr.Dropdown(choices=choices, value=job_ids),
                    ", ".join(map(str, job_ids)), False, COMPARE_TAB_LABEL)

        comparing = [compare.picker, compare.job_ids, job_page.looking, tab_to_show]
        jobs.compared.then(open_compare, jobs.compare_ids, comparing,
                           show_progress="hidden").then(
            None, tab_to_show, None, js=SHOW_TAB_JS).then(
            compare.show, compare.job_ids, compare.outputs, show_progress="hidden")
        blocks.load(account_line, None, account, show_progress="hidden")
        blocks.load(open_job_in_address, None, opening, show_progress="hidden") \
            .then(None, tab_to_show, None, js=SHOW_TAB_JS)
        job_page.opened.then(None, job_page.job_id, None, js=NAME_JOB_IN_ADDRESS_JS)

        @answers_while_unreachable(nothing_to_compare)
        def open_compared_backends(ids_text: str | None, request: gr.Request):
            return open_compare(compared_ids(ids_text), request)

        # "Continue from this job": the New job form, its model the job's weights (job:ID);
        # the objective, data and the rest are the user's to pick.
        job_page.continue_from.click(
            continue_from_job, job_page.job_id, [new_job.model, tab_to_show],
            show_progress="hidden").then(None, tab_to_show, None, js=SHOW_TAB_JS) \
            .then(None, js=TO_TOP_JS)

        # "Compare backends" opens Compare on the two jobs it started.
        job_page.backends_compared.then(
            open_compared_backends,
            job_page.compared_job_ids, comparing, show_progress="hidden").then(
            None, tab_to_show, None, js=SHOW_TAB_JS).then(
            # From the job page's own state: the Compare tab's box, set from another tab
            # while its tab was never drawn, still reads empty here.
            compare.show, job_page.compared_job_ids, compare.outputs,
            show_progress="hidden").then(None, js=TO_TOP_JS)
    one_progress_target_when_hidden(blocks)
    wait_out_database_outages(blocks)
    return blocks


def one_progress_target_when_hidden(blocks: gr.Blocks) -> None:
    """Each event that shows no progress gets one progress target, its first output.

    Gradio's front end keeps a loading status for every component that has been an event's
    progress target (by default, all its outputs) and, on each status change of any event (a
    timer's tick has three), copies and re-applies every one of them. With the job page's
    refresh (~35 outputs) among them, that walk was a third of what a live job's page cost
    the browser (bench/live_view.py). A hidden progress needs no target; one keeps it short."""
    for function in blocks.fns.values():
        if function.show_progress == "hidden" and function.show_progress_on is None \
                and len(function.outputs) > 1:
            function.show_progress_on = function.outputs[:1]


def account_line(request: gr.Request) -> str:
    """Who this page acts for, and how to sign out; or that nobody needs to sign in.
    HTML, not Markdown: Gradio opens Markdown links in a new tab, and sign-out must not."""
    principal = principal_of(request)
    if principal.open_access:
        return ("<p><strong>Open access</strong>: no accounts exist, so anyone who can reach "
                "this machine's loopback address may use TuneDeck. Create one with "
                "<code>tunedeck user add NAME --admin</code> to require sign-in. · "
                f"{REST_API_LINK}</p>")
    role = "admin" if principal.is_admin else "user"
    return (f"<p>Signed in as <strong>{html.escape(principal.name)}</strong> ({role}) · "
            f'{REST_API_LINK} · <a href="/logout" id="sign-out" target="_self">Sign out</a></p>')


def timers_while_shown(shown_tab: gr.Tab, timer_tabs: tuple[gr.Tab, ...]) -> tuple:
    """Each tab's refresh timer on while that tab is the one shown, off otherwise."""
    return tuple(gr.Timer(active=tab is shown_tab) for tab in timer_tabs)


def open_job(job_id: int | None):
    """Put `job_id` in the Job tab's box (and say that tab is the one in view; the browser
    then shows it); nothing changes when there is no job to show."""
    if job_id is None:
        return gr.skip(), gr.skip(), ""
    return job_id, True, JOB_TAB_LABEL


def open_job_in_address(request: gr.Request):
    """A page opened at `/?job=ID` shows that job's page."""
    return open_job(job_in_address(request.query_params))


def continue_from_job(job_id_text: str | None):
    """The New job form's model set to the job's weights, and that tab shown."""
    job_id = parse_job_id(job_id_text)
    if job_id is None:
        return gr.skip(), ""
    return f"job:{job_id}", NEW_JOB_TAB_LABEL


def nothing_to_compare() -> tuple:
    """open_compare's answer when it opens nothing: above all no tab to show, so the tab a
    handler asked for before is not shown again."""
    return gr.skip(), gr.skip(), gr.skip(), ""


def compared_ids(ids_text: str | None) -> list[int] | None:
    """The ids "Compare backends" started ("7, 8"), or None when it started none."""
    return [int(part) for part in ids_text.split(",")] if ids_text else None
