"""The "Cluster" tab: the workers (from their heartbeats), each GPU with its live free
memory and the job holding it, and the queued jobs with what they wait for."""
from __future__ import annotations

from functools import partial

import gradio as gr

from app.ui.cluster_handlers import cluster_tables

REFRESH_SECONDS = 2.0


def build_cluster_tab(*, database, worker_lost_seconds: float) -> None:
    gr.Markdown("Workers report every few seconds. A worker silent for "
                f"{worker_lost_seconds:g} s is lost: its jobs fail, or restart elsewhere when "
                "their spec sets `max_restarts`. Add a GPU host by running `tunedeck worker` "
                "there with the same database and broker URLs.")
    tables = partial(cluster_tables, database=database, worker_lost_seconds=worker_lost_seconds)
    # Callable values are read again on each page load, so a new browser sees fresh rows.
    gr.Markdown("### Workers")
    workers = gr.Dataframe(lambda: tables()[0], interactive=False, wrap=True,
                           elem_id="cluster-workers")
    gr.Markdown("### GPUs")
    gpus = gr.Dataframe(lambda: tables()[1], interactive=False, wrap=True, elem_id="cluster-gpus")
    gr.Markdown("### Queued jobs")
    queued = gr.Dataframe(lambda: tables()[2], interactive=False, wrap=True,
                          elem_id="cluster-queued")
    gr.Timer(REFRESH_SECONDS).tick(tables, None, [workers, gpus, queued], show_progress="hidden",
                                   concurrency_limit=None)
