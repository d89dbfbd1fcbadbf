"""`tunedeck lora-targets SPEC.yaml [--json]`: what the spec's LoRA adapts on its model, as a
running server's `POST /api/lora-targets` resolves it (the trainer's own rule)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli.text_table import text_table
from tunedeck.lora_targets_text import counts_line, target_groups


def add_lora_targets_command(commands, *, add_server_options) -> None:
    lora_targets = commands.add_parser("lora-targets", help="what SPEC.yaml's LoRA adapts on its "
                                       "model (modules, expert weights, router, trainable count)")
    lora_targets.add_argument("spec", type=Path)
    lora_targets.add_argument("--json", action="store_true",
                              help="print the JSON of POST /api/lora-targets")
    add_server_options(lora_targets)
    lora_targets.set_defaults(handler=_run_lora_targets)


def preview_as_text(preview: dict, *, dropout: float) -> str:
    """The counts, then a table of what is adapted: a kind of target a line."""
    rows = [[label, ", ".join(names)] for label, names in target_groups(preview, dropout=dropout)]
    return "\n\n".join([counts_line(preview), text_table(("ADAPTED", "NAMES"), rows)])


def _run_lora_targets(arguments: argparse.Namespace) -> int:
    from cli import server_calls

    spec = server_calls.with_absolute_local_paths(server_calls.load_spec_or_exit(arguments.spec))
    preview = server_calls.post_to_server(arguments, "/api/lora-targets", spec.model_dump(mode="json"),
                                          expected_status=200,
                                          refusal="server could not resolve the targets")
    print(json.dumps(preview, indent=2) if arguments.json
          else preview_as_text(preview, dropout=spec.lora.dropout))
    return 0
