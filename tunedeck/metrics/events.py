"""The one schema of a metric line in `metrics/rank-<K>.jsonl`.

Each line is a JSON object with `kind` and `time` (Unix seconds) and `rank`:
- kind "step":   step, loss, learning_rate, grad_norm, tokens_per_second, step_seconds,
                 tokens (this step, all ranks), mfu (on a GPU only: model FLOPs utilisation)
- kind "memory": step, host, device, allocated_mb, reserved_mb, peak_mb (allocated),
                 peak_reserved_mb, rss_mb
- kind "eval":   step, eval_loss (mean over every answer token of the eval set, all
                 ranks), eval_tokens (how many answer tokens that mean is over)
- kind "footprint": step, params_bytes, grads_bytes, optimizer_bytes (what this rank
                 holds, measured once a launch after its first step; see trainer/footprint.py)
- kind "notice": level ("info" | "error"), message
Writer (trainer) and reader (worker) both import this module.
"""
from __future__ import annotations

import json
from typing import Any

STEP = "step"
MEMORY = "memory"
NOTICE = "notice"
EVAL = "eval"
FOOTPRINT = "footprint"
KINDS = (STEP, MEMORY, NOTICE, EVAL, FOOTPRINT)

STEP_FIELDS = ("step", "loss", "learning_rate", "grad_norm", "tokens_per_second",
               "step_seconds", "tokens", "mfu")
MEMORY_FIELDS = ("step", "host", "device", "allocated_mb", "reserved_mb", "peak_mb",
                 "peak_reserved_mb", "rss_mb")
NOTICE_FIELDS = ("level", "message")
EVAL_FIELDS = ("step", "eval_loss", "eval_tokens")
FOOTPRINT_FIELDS = ("step", "params_bytes", "grads_bytes", "optimizer_bytes")


def encode_event(kind: str, *, rank: int, time: float, **fields: Any) -> str:
    return json.dumps({"kind": kind, "rank": rank, "time": time, **fields}) + "\n"


def decode_event(line: str) -> dict[str, Any] | None:
    """A parsed event, or None for a line that is not one (a torn or foreign line)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("kind") not in KINDS:
        return None
    if not isinstance(event.get("rank"), int) or not isinstance(event.get("time"), (int, float)):
        return None
    return event
