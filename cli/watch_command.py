"""`tunedeck watch JOB_ID`: a job followed from a terminal, through a running server's
`GET /api/jobs/{id}` and `GET /api/jobs/{id}/metrics`: a progress bar, then what the job
page's progress says (its status, the phase before step 1, the step with its loss,
throughput and ETA), until the job stops. On a terminal one line is redrawn in place;
into a pipe or a file, a line each time it changes. Exits 0 when it succeeded, 1
otherwise."""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from typing import Any, TextIO

from cli.job_commands import latest_step_words

FINISHED = ("succeeded", "failed", "cancelled")
# Enough of the newest points for the ETA's recent mean (the route keeps the last point).
METRIC_POINTS = 200
BAR_WIDTH = 20


def add_watch_command(commands, *, add_server_options) -> None:
    watch = commands.add_parser(
        "watch", help="follow a job until it stops: a progress bar, its status, what it does "
        "before step 1 (download, weights, tokenizing), then its step, loss, tokens/s and ETA; "
        "while the server's database is unreachable (503) it waits and resumes")
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
        words += latest_step_words(job, train, max_steps)
    elif series.get("phase") and job["status"] == "running":
        words.append(phase_text(series["phase"][0]))  # the newest phase line, a list of one
    return " · ".join(words)


def progress_bar(done: float, total: float | None, width: int = BAR_WIDTH) -> str:
    """"[########------------]  40%"; an empty bar with no total to measure against."""
    if not total:
        return f"[{'-' * width}]    "
    fraction = min(max(done / total, 0.0), 1.0)
    filled = int(fraction * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {fraction * 100:3.0f}%"


def watch_line(job: dict[str, Any], series: dict[str, Any]) -> str:
    """The bar of steps done (of the phase's units before step 1), then the progress line."""
    train = series.get("train") or []
    if train:
        bar = progress_bar(train[-1]["step"], (job.get("spec") or {}).get("max_steps"))
    elif series.get("phase") and job["status"] == "running":
        phase = series["phase"][0]
        done = phase.get("done")
        bar = progress_bar(done if isinstance(done, (int, float)) else 0, phase.get("total"))
    else:
        bar = progress_bar(0, None)
    return f"{bar} {progress_line(job, series)}"


class LinePrinter:
    """One line a change: redrawn in place on a terminal (cut to its width, so it never
    wraps), appended with the time of day elsewhere."""

    def __init__(self, stream: TextIO):
        self.stream, self.last = stream, None
        self.in_place = stream.isatty()

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.in_place:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write(f"\r{line[:width]}\x1b[K")
        else:
            self.stream.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.in_place and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()


def _run_watch(arguments: argparse.Namespace) -> int:
    from cli.server_calls import get_following

    refusal = f"cannot watch job {arguments.job_id}"
    printer = LinePrinter(sys.stdout)
    try:
        while True:
            job = get_following(arguments, f"/api/jobs/{arguments.job_id}", refusal=refusal)
            series = get_following(arguments, f"/api/jobs/{arguments.job_id}/metrics",
                                   refusal=refusal, params={"max_points": METRIC_POINTS})
            printer.show(watch_line(job, series))
            if job["status"] in FINISHED:
                break
            time.sleep(max(arguments.interval, 0.2))
    finally:
        printer.close()
    if job.get("error"):
        print(job["error"], file=sys.stderr)
    return 0 if job["status"] == "succeeded" else 1
