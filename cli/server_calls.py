"""What the client commands share: a spec file read or a clear exit, a call to a running
server with its token, and local paths made absolute."""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO


def load_spec_or_exit(path: Path, assignments: Sequence[str] = ()):
    """The spec file, with `--set KEY=VALUE`'s `assignments`; exits naming the file and
    each field at fault."""
    from pydantic import ValidationError

    from tunedeck.spec.text import format_validation_error, load_spec_file

    try:
        return load_spec_file(path, assignments=assignments)
    except OSError as error:
        sys.exit(f"{path}: {error.strerror}")
    except (ValidationError, ValueError) as error:
        sys.exit(f"{path}: invalid job spec\n{format_validation_error(error)}")


def post_to_server(arguments: argparse.Namespace, path: str, body, *,
                    expected_status: int | tuple[int, ...], refusal: str,
                    method: str = "POST", params: dict | None = None) -> Any:
    """The JSON answer of `method path` on the server; exits with the server's message
    (its `detail`), after `refusal`, for any other status than `expected_status`."""
    import httpx

    try:
        # A preflight's POST waits up to 30 s for its worker's report.
        response = httpx.request(method, f"{server_url(arguments)}{path}", json=body,
                                 params=params, headers=auth_headers(arguments), timeout=60)
    except httpx.HTTPError as error:
        exit_unreachable(arguments, error)
    exit_unless(response, expected_status, refusal)
    return response.json()


def get_from_server(arguments: argparse.Namespace, path: str, *, refusal: str,
                    params: dict | None = None) -> Any:
    return post_to_server(arguments, path, None, expected_status=200, refusal=refusal,
                          method="GET", params=params)


# What a command that follows a job waits out rather than exits on: the web's 503 while
# its database is unreachable, and a proxy's 502/504 while the web behind it restarts.
PASSING_STATUSES = (502, 503, 504)
# Between two asks while waiting: the server's Retry-After, within these bounds.
WAIT_SECONDS = (1.0, 30.0)


def get_following(arguments: argparse.Namespace, path: str, *, refusal: str,
                  params: dict | None = None, notes: TextIO = sys.stderr) -> Any:
    """`get_from_server` for `watch` and `logs --follow`: a passing outage (above) is
    waited out, said once on `notes` when it starts and once when it ends, instead of
    ending the command."""
    import httpx

    waiting_since = None
    while True:
        try:
            response = httpx.get(f"{server_url(arguments)}{path}", params=params,
                                 headers=auth_headers(arguments), timeout=60)
        except httpx.HTTPError as error:
            exit_unreachable(arguments, error)
        if response.status_code not in PASSING_STATUSES:
            if waiting_since is not None:
                print(f"TuneDeck answers again after {time.monotonic() - waiting_since:.0f} s: "
                      "resuming", file=notes, flush=True)
            exit_unless(response, 200, refusal)
            return response.json()
        seconds = retry_after_seconds(response)
        if waiting_since is None:
            waiting_since = time.monotonic()
            print(f"{server_message(response)} (HTTP {response.status_code}): waiting, asking "
                  f"again every {seconds:g} s (Ctrl-C stops)", file=notes, flush=True)
        time.sleep(seconds)


def retry_after_seconds(response) -> float:
    """The response's Retry-After in seconds (a number; a date or none: the least wait),
    within WAIT_SECONDS."""
    low, high = WAIT_SECONDS
    try:
        seconds = float(response.headers.get("retry-after", low))
    except ValueError:
        seconds = low
    return min(max(seconds, low), high)


def add_worker_answer_options(parser, *, json_help: str, what: str,
                              default_timeout: float) -> None:
    """--json and --timeout of a command that asks a worker (`ask_worker`)."""
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--timeout", type=float, default=default_timeout,
                        help=f"seconds to wait for the {what} (default {default_timeout:g})")


def ask_worker(arguments: argparse.Namespace, path: str, body, *, poll_path: str,
               timeout: float, poll_seconds: float, refusal: str) -> dict[str, Any]:
    """A request a worker answers (a data preflight, a generation): POST it, then read
    `poll_path` (with `{id}`) until it finished or `timeout` seconds passed; the answer as
    it stands then (its `waiting` says why, if unfinished)."""
    from tunedeck.worker_requests.states import FINISHED

    answer = post_to_server(arguments, path, body, expected_status=(200, 202), refusal=refusal)
    deadline = time.monotonic() + timeout
    while answer["status"] not in FINISHED and time.monotonic() < deadline:
        time.sleep(poll_seconds)
        answer = get_from_server(arguments, poll_path.format(id=answer["id"]),
                                 refusal=f"{refusal}: not readable")
    return answer


def server_url(arguments: argparse.Namespace) -> str:
    """`--server`, else TUNEDECK_URL, else http://TUNEDECK_HOST:TUNEDECK_PORT."""
    server = arguments.server or os.environ.get("TUNEDECK_URL")
    if not server:
        from tunedeck.settings import load_settings

        settings = load_settings()
        server = f"http://{settings.host}:{settings.port}"
    return server.rstrip("/")


def auth_headers(arguments: argparse.Namespace) -> dict[str, str]:
    """`--token`, else TUNEDECK_TOKEN, as a bearer token (none: open access)."""
    token = arguments.token or os.environ.get("TUNEDECK_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def exit_unreachable(arguments: argparse.Namespace, error: Exception) -> NoReturn:
    from tunedeck.accounts.redaction import redact_url

    sys.exit(f"cannot reach TuneDeck at {redact_url(server_url(arguments))}: {error}")


def exit_unless(response, expected_status: int | tuple[int, ...], refusal: str) -> None:
    """Exit with `refusal: the server's message` unless the response has an expected status
    (a streamed response is read first)."""
    expected = expected_status if isinstance(expected_status, tuple) else (expected_status,)
    if response.status_code in expected:
        return
    response.read()
    message = server_message(response)
    if response.status_code == 401:
        sys.exit(f"{refusal}: the server wants an API token ({message}); "
                 "set TUNEDECK_TOKEN to one from `tunedeck token create USER`")
    sys.exit(f"{refusal}: {message}")


def server_message(response) -> str:
    """What the server said: its JSON `detail` (a 422's field errors as `field: message`),
    else its text, else its status."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list):
        return "; ".join(_field_error(problem) for problem in detail)
    if detail:
        return str(detail)
    return response.text.strip() or f"HTTP {response.status_code}"


def _field_error(problem: Any) -> str:
    if not isinstance(problem, dict):
        return str(problem)
    location = [str(part) for part in problem.get("loc", []) if part not in ("body", "query", "path")]
    return f"{'.'.join(location)}: {problem.get('msg')}" if location else str(problem.get("msg"))


def with_absolute_local_paths(spec):
    """A path that exists here means this folder, not the worker's; say so explicitly."""
    changes = {}
    for field in ("model", "dataset", "eval_dataset"):
        value = getattr(spec, field, None)  # a preflight request has no eval_dataset
        if value and not value.startswith("builtin:") and Path(value).expanduser().exists():
            changes[field] = str(Path(value).expanduser().resolve())
    return spec.model_copy(update=changes) if changes else spec
