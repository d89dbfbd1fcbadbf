"""The "Cluster" tab: the workers (from their heartbeats), each GPU with its live free
memory and the job holding it (or, for a host without GPUs, what that host runs), and the
queued jobs with what they wait for."""
from __future__ import annotations

import gradio as gr

from app.ui.cluster.cluster_handlers import cluster_tables

REFRESH_SECONDS = 2.0


def build_cluster_tab(*, database, worker_lost_seconds: float, tab: gr.Tab) -> gr.Timer:
    """`tab`: the Cluster tab itself; showing it redraws the tables at once. Returns the
    refresh timer, inactive and not rendered: build_ui renders it outside the tabs and turns
    it on while the tab is shown."""
    gr.Markdown("Workers report every few seconds. A worker silent for "
                f"{worker_lost_seconds:g} s is lost: its jobs fail, or restart elsewhere when "
                "their spec sets `max_restarts`. Add a GPU host by running `tunedeck worker` "
                "there with the same database and broker URLs.")

    def tables():
        return cluster_tables(database=database, worker_lost_seconds=worker_lost_seconds)

    def show():
        shown = tables()
        has_gpus = not shown.gpus.empty
        return (shown.workers, gr.Dataframe(shown.gpus, visible=has_gpus),
                gr.Markdown(shown.cpu_hosts, visible=bool(shown.cpu_hosts)), shown.queued)

    # Callable values are read again on each page load, so a new browser sees fresh rows.
    gr.Markdown("### Workers")
    workers = gr.Dataframe(lambda: tables().workers, interactive=False, wrap=True,
                           elem_id="cluster-workers")
    gr.Markdown("### Devices")
    gpus = gr.Dataframe(lambda: tables().gpus, interactive=False, wrap=True,
                        elem_id="cluster-gpus")
    cpu_hosts = gr.Markdown(lambda: tables().cpu_hosts or "No online worker yet.",
                            elem_id="cluster-cpu-hosts")
    gr.Markdown("### Queued jobs")
    queued = gr.Dataframe(lambda: tables().queued, interactive=False, wrap=True,
                          elem_id="cluster-queued")
    outputs = [workers, gpus, cpu_hosts, queued]
    timer = gr.Timer(REFRESH_SECONDS, active=False, render=False)  # build_ui renders it
    timer.tick(show, None, outputs, show_progress="hidden", concurrency_limit=None)
    tab.select(show, None, outputs, show_progress="hidden")
    return timer
