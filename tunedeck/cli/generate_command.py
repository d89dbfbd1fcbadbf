"""`tunedeck generate ID "prompt" [--variant merged|adapter|base] [--max-new-tokens N]
[--temperature T] [--top-p P] [--seed S] [--json]`: a prompt to a finished job's model
through a running server's `POST /api/jobs/{id}/generate` (polling `GET /api/generations/{id}`
while its worker is still at it), printed as the answer's text or as the API's JSON."""
from __future__ import annotations

import argparse
import json
import sys
import time

POLL_SECONDS = 0.5


def add_generate_command(commands, *, add_server_options) -> None:
    generate = commands.add_parser(
        "generate", help="answer PROMPT with a succeeded job's model (on the worker that ran it)")
    generate.add_argument("job_id", type=int)
    generate.add_argument("prompt", help="the user's message (the model's chat template "
                          "renders it, as training rendered its prompts)")
    generate.add_argument("--variant", choices=("merged", "adapter", "base"), default="merged",
                          help="the merged weights (default), the base with the adapter, or "
                               "the base model the job started from")
    generate.add_argument("--max-new-tokens", type=int, default=128)
    generate.add_argument("--temperature", type=float, default=0.7,
                          help="0: greedy decoding, the same text every time (default 0.7)")
    generate.add_argument("--top-p", type=float, default=0.9)
    generate.add_argument("--seed", type=int, default=None,
                          help="sample from this seed: the same text each time above temperature 0")
    generate.add_argument("--json", action="store_true",
                          help="print the JSON of POST /api/jobs/{id}/generate")
    generate.add_argument("--timeout", type=float, default=600.0,
                          help="seconds to wait for the answer (default 600)")
    add_server_options(generate)
    generate.set_defaults(handler=_run_generate)


def _run_generate(arguments: argparse.Namespace) -> int:
    from tunedeck.cli import server_calls
    from tunedeck.generation.request import FINISHED

    body = {"messages": [{"role": "user", "content": arguments.prompt}],
            "max_new_tokens": arguments.max_new_tokens, "temperature": arguments.temperature,
            "top_p": arguments.top_p, "variant": arguments.variant, "seed": arguments.seed}
    answer = server_calls.post_to_server(arguments, f"/api/jobs/{arguments.job_id}/generate", body,
                                         expected_status=(200, 202),
                                         refusal=f"job {arguments.job_id} gave no answer")
    deadline = time.monotonic() + arguments.timeout
    while answer["status"] not in FINISHED and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        answer = server_calls.post_to_server(arguments, f"/api/generations/{answer['id']}", None,
                                             expected_status=200, method="GET",
                                             refusal="generation not readable")
    if arguments.json:
        print(json.dumps(answer, indent=2))
    elif answer["status"] == "done":
        print(answer["text"])
        print(f"({answer['tokens']} tokens in {answer['seconds']:.2f} s, {answer['variant']} "
              f"on {answer['device']})", file=sys.stderr)
    if answer["status"] not in FINISHED:
        sys.exit(f"generation {answer['id']} not finished after {arguments.timeout:g} s: "
                 f"{answer.get('waiting')}")
    if answer["status"] == "failed":
        sys.exit(f"generation {answer['id']} failed: {answer['error']}")
    return 0
