"""`tunedeck preflight SPEC.yaml [--json]`: the data preflight of a job spec's data fields,
run by a worker through a running server's `POST /api/datasets/preflight` (polling its GET
while the worker is still at it), printed as text or as the API's JSON."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.server_calls import add_worker_answer_options

POLL_SECONDS = 1.0


def add_preflight_command(commands, *, add_server_options) -> None:
    preflight = commands.add_parser(
        "preflight", help="check SPEC.yaml's data on a worker: records, token lengths against "
        "seq_len, answers truncation cuts, duplicates, an example with its trained tokens marked")
    preflight.add_argument("spec", type=Path, help="a job spec, or just its data fields")
    add_worker_answer_options(preflight, json_help="print the JSON of POST /api/datasets/preflight",
                              what="report", default_timeout=300.0)
    add_server_options(preflight)
    preflight.set_defaults(handler=_run_preflight)


def _run_preflight(arguments: argparse.Namespace) -> int:
    from cli import server_calls
    from tunedeck.data.preflight_text import preflight_as_text
    from tunedeck.worker_requests.states import FINISHED

    request = server_calls.with_absolute_local_paths(_load_request_or_exit(arguments.spec))
    answer = server_calls.ask_worker(
        arguments, "/api/datasets/preflight", request.model_dump(mode="json"),
        poll_path="/api/datasets/preflight/{id}", timeout=arguments.timeout,
        poll_seconds=POLL_SECONDS, refusal="server refused the preflight")
    print(json.dumps(answer, indent=2) if arguments.json else preflight_as_text(answer))
    if answer["status"] not in FINISHED:
        sys.exit(f"preflight {answer['id']} not finished after {arguments.timeout:g} s: "
                 f"{answer.get('waiting')}")
    return 0 if answer["status"] == "done" else 1


def _load_request_or_exit(path: Path):
    import yaml
    from pydantic import ValidationError

    from tunedeck.data.preflight_request import PreflightRequest
    from tunedeck.spec.text import format_validation_error

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        sys.exit(f"{path}: {error.strerror}")
    except yaml.YAMLError as error:
        sys.exit(f"{path}: not valid YAML or JSON: {error}")
    if not isinstance(data, dict):
        sys.exit(f"{path}: expected a mapping of spec keys, got {type(data).__name__}")
    try:
        return PreflightRequest.from_spec_data(data, source=str(path))
    except ValidationError as error:
        sys.exit(f"{path}: invalid preflight request\n{format_validation_error(error)}")
    except ValueError as error:
        sys.exit(str(error))
