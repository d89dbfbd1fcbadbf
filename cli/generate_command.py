"""`tunedeck generate ID "prompt" [--variant merged|adapter|base] [--max-new-tokens N]
[--temperature T] [--top-p P] [--seed S] [--json]`: a prompt to a finished job's model
through a running server's `POST /api/jobs/{id}/generate` (polling `GET /api/generations/{id}`
while its worker is still at it), printed as the answer's text or as the API's JSON."""
from __future__ import annotations

import argparse
import json
import sys

from cli.server_calls import add_worker_answer_options

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
    add_worker_answer_options(generate, json_help="print the JSON of POST /api/jobs/{id}/generate",
                              what="answer", default_timeout=600.0)
    add_server_options(generate)
    generate.set_defaults(handler=_run_generate)


def _run_generate(arguments: argparse.Namespace) -> int:
    from cli import server_calls
    from tunedeck.generation.answer_text import speed_text
    from tunedeck.worker_requests.states import FINISHED

    body = {"messages": [{"role": "user", "content": arguments.prompt}],
            "max_new_tokens": arguments.max_new_tokens, "temperature": arguments.temperature,
            "top_p": arguments.top_p, "variant": arguments.variant, "seed": arguments.seed}
    answer = server_calls.ask_worker(
        arguments, f"/api/jobs/{arguments.job_id}/generate", body,
        poll_path="/api/generations/{id}", timeout=arguments.timeout, poll_seconds=POLL_SECONDS,
        refusal=f"job {arguments.job_id} gave no answer")
    if arguments.json:
        print(json.dumps(answer, indent=2))
    elif answer["status"] == "done":
        print(answer["text"])
        print(f"({speed_text(answer['tokens'], answer['seconds'])}, {answer['variant']} on "
              f"{answer['device']})", file=sys.stderr)
    if answer["status"] not in FINISHED:
        sys.exit(f"generation {answer['id']} not finished after {arguments.timeout:g} s: "
                 f"{answer.get('waiting')}")
    if answer["status"] == "failed":
        sys.exit(f"generation {answer['id']} failed: {answer['error']}")
    return 0
