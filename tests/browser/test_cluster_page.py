"""The Cluster tab in a real browser: the worker of `tunedeck up` is listed from its
heartbeats (host, queue, state, what it has), and a job for a queue no worker serves is
shown waiting, with the reason."""
from __future__ import annotations

import socket

import pytest

from tests.browser.tables import table_rows

pytestmark = [pytest.mark.browser]


def test_the_cluster_tab_lists_the_worker_and_a_waiting_job(page, tunedeck_server):
    waiting = tunedeck_server.submit({"name": "for-nobody", "max_steps": 2, "queue": "h100"})
    page.get_by_role("tab", name="Cluster", exact=True).click()
    page.wait_for_function(
        "() => document.querySelector('#cluster-workers')?.innerText.includes('online')")
    workers = table_rows(page, "#cluster-workers")
    host = socket.gethostname()
    assert [(row["worker"], row["host"], row["queues"], row["state"]) for row in workers] == \
        [(f"{host}-default", host, "default", "online")]
    assert workers[0]["resources"].startswith("no GPU: ")  # this machine's ranks run on CPUs
    assert workers[0]["jobs running"] == "idle"
    page.wait_for_function(
        "() => document.querySelector('#cluster-queued')?.innerText.includes('for-nobody')")
    queued = table_rows(page, "#cluster-queued")
    assert [(row["id"], row["queue or host"], row["waiting for"]) for row in queued] == \
        [(str(waiting), "h100", "waiting: no live worker serves queue 'h100'")]
