"""`tunedeck logs ID [--follow] [--tail N]`: a job's torchrun log from a running server: the
whole of it (`GET /api/jobs/{id}/logs/full`), its last N lines, or, following, what it
appends (`GET /api/jobs/{id}/logs?offset=N`) until the job finishes."""
from __future__ import annotations

import argparse
import sys
import time

from cli.server_calls import (auth_headers, exit_unless, get_following, get_from_server,
                              server_url)

MAX_TAIL_LINES = 5000  # the route's own limit


def add_logs_command(commands, *, add_server_options) -> None:
    logs = commands.add_parser("logs", help="a job's torchrun log (every rank's lines)")
    logs.add_argument("job_id", type=int)
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing what the log appends until the job finishes "
                      "(waiting out a server whose database is unreachable)")
    logs.add_argument("--tail", type=_tail_lines, default=None, metavar="N",
                      help=f"only the last N lines (1 to {MAX_TAIL_LINES})")
    logs.add_argument("--interval", type=float, default=1.0,
                      help="with --follow, seconds between two looks (default 1)")
    add_server_options(logs)
    logs.set_defaults(handler=_run_logs)


def _tail_lines(text: str) -> int:
    lines = int(text)
    if not 1 <= lines <= MAX_TAIL_LINES:
        raise argparse.ArgumentTypeError(f"from 1 to {MAX_TAIL_LINES}, not {lines}")
    return lines


def _run_logs(arguments: argparse.Namespace) -> int:
    job_id, refusal = arguments.job_id, f"no log of job {arguments.job_id}"
    if arguments.tail is not None:
        tail = get_from_server(arguments, f"/api/jobs/{job_id}/logs", refusal=refusal,
                               params={"lines": arguments.tail})
        for line in tail["lines"]:
            print(line)
        sys.stdout.flush()
        offset = tail["next_offset"]
    elif arguments.follow:
        offset = 0
    else:
        return _print_whole_log(arguments, refusal)
    if arguments.follow:
        _follow(arguments, offset, refusal)
    return 0


def _follow(arguments: argparse.Namespace, offset: int, refusal: str) -> None:
    while True:
        chunk = get_following(arguments, f"/api/jobs/{arguments.job_id}/logs",
                                refusal=refusal, params={"offset": offset})
        if chunk["text"]:
            sys.stdout.write(chunk["text"])
            sys.stdout.flush()
        if chunk["complete"]:
            return
        if chunk["next_offset"] == offset:  # nothing new yet
            time.sleep(max(arguments.interval, 0.1))
        offset = chunk["next_offset"]


def _print_whole_log(arguments: argparse.Namespace, refusal: str) -> int:
    import httpx

    url = f"{server_url(arguments)}/api/jobs/{arguments.job_id}/logs/full"
    try:
        with httpx.stream("GET", url, headers=auth_headers(arguments), timeout=60) as response:
            exit_unless(response, 200, refusal)
            for chunk in response.iter_bytes():
                sys.stdout.buffer.write(chunk)
    except httpx.HTTPError as error:
        from cli.server_calls import exit_unreachable

        exit_unreachable(arguments, error)
    sys.stdout.flush()
    return 0
