"""`tunedeck watch JOB_ID`: a job followed from a terminal, through a running server's
`GET /api/jobs/{id}` and `GET /api/jobs/{id}/metrics`: a line each time what the job page's
progress says changes (its status, the phase before step 1, the step with its loss and
throughput), until the job stops. Exits 0 when it succeeded, 1 otherwise."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

FINISHED = ("succeeded", "failed", "cancelled")
# The newest points are all the terminal shows; the route's downsampling keeps the last.
METRIC_POINTS = 10


def add_watch_command(commands, *, add_server_options) -> None:
    watch = commands.add_parser(
        "watch", help="follow a job until it stops: its status, what it does before step 1 "
        "(download, weights, tokenizing), then its step, loss and tokens/s")
    watch.add_argument("job_id", type=int)
    watch.add_argument("--interval", type=float, default=2.0,
                       help="seconds between two looks (default 2)")
    add_server_options(watch)
    watch.set_defaults(handler=_run_watch)


def progress_line(job: dict[str, Any], series: dict[str, Any]) -> str:
    """What the job is at, in one line (the same words as the job page's progress)."""
    from tunedeck.metrics.events import phase_text

    words = [f"job {job['id']} {job['status']}"]
    train = series.get("train") or []
    max_steps = (job.get("spec") or {}).get("max_steps")
    if train:
        latest = train[-1]
        words.append(f"step {latest['step']}" + (f" / {max_steps}" if max_steps else ""))
        if latest.get("loss") is not None:
            words.append(f"loss {latest['loss']:.4f}")
        if latest.get("tokens_per_second") is not None:
            words.append(f"{latest['tokens_per_second']:,.0f} tokens/s")
    elif series.get("phase") and job["status"] == "running":
        words.append(phase_text(series["phase"][0]))  # the newest phase line, a list of one
    return " · ".join(words)


def _run_watch(arguments: argparse.Namespace) -> int:
    from tunedeck.cli import server_calls

    def read(path: str) -> Any:
        return server_calls.post_to_server(arguments, path, None, expected_status=200,
                                           refusal=f"cannot watch job {arguments.job_id}",
                                           method="GET")

    last = None
    while True:
        job = read(f"/api/jobs/{arguments.job_id}")
        series = read(f"/api/jobs/{arguments.job_id}/metrics?max_points={METRIC_POINTS}")
        line = progress_line(job, series)
        if line != last:
            print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
            last = line
        if job["status"] in FINISHED:
            if job.get("error"):
                print(job["error"], file=sys.stderr)
            return 0 if job["status"] == "succeeded" else 1
        time.sleep(max(arguments.interval, 0.2))
