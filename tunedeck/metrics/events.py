"""The one schema of a metric line in `metrics/rank-<K>.jsonl`.

Each line is a JSON object with `kind` and `time` (Unix seconds) and `rank`:
- kind "step":   step, loss, learning_rate, grad_norm, tokens_per_second, step_seconds,
                 tokens (this step, all ranks), mfu and mfu_6n (on a GPU only: model FLOPs
                 utilisation with the method's FLOPs and with plain 6N; trainer/mfu.py);
                 under objective "dpo" only (PREFERENCE_FIELDS), each the mean over the
                 step's pairs on all ranks: rewards_chosen and rewards_rejected (beta times
                 how far the policy moved each answer's log-prob from the reference's),
                 reward_margin (chosen minus rejected), reward_accuracy (the share of pairs
                 whose chosen reward is the higher, 0..1), logps_chosen and logps_rejected
                 (the policy's summed log-probability of each answer);
                 under objective "grpo" only (RL_FIELDS), over the step's round of samples
                 on all ranks: reward (the mean weighted sum), reward_std,
                 frac_reward_zero_std (the share of groups whose rewards all agreed),
                 reward_means ({reward label: its unweighted mean}), completion_length
                 (mean, _min, _max, in tokens), clipped_ratio (the share cut at
                 max_completion_length), sampling_seconds, scoring_seconds and
                 training_seconds (the step's time split; the largest of any rank); and,
                 each a mean over the step's loss units, clip_ratio_low, clip_ratio_high,
                 entropy and (beta above 0) kl
- kind "memory": step, host, device, allocated_mb, reserved_mb, peak_mb (allocated),
                 peak_reserved_mb, rss_mb
- kind "eval":   step, eval_loss (mean over every answer token of the eval set, all
                 ranks), eval_tokens (how many answer tokens that mean is over)
- kind "rollout": step, samples (objective grpo, rank 0, every grpo.rollouts_every steps:
                 a few of the step's prompts, each {prompt, completions: [{text, reward
                 (the weighted sum), rewards ({label: its score})}]}, all G of its group)
- kind "footprint": step, params_bytes, grads_bytes, optimizer_bytes (what this rank
                 holds, measured once a launch after its first step; see trainer/footprint.py)
- kind "notice": level ("info" | "error"), message
- kind "phase":  phase (one of PHASES: what a rank does before step 1), state ("start" |
                 "progress" | "end" | "failed": it raised), done, total (null when
                 unknown), unit ("bytes" | "tensors" | "records" | null; "shards" in
                 older jobs), elapsed (seconds since the phase started), message (a file
                 name, or null); progress lines come a few a second at most
Writer (trainer) and reader (worker) both import this module.
"""
from __future__ import annotations

import json
from typing import Any

from tunedeck.units import GB, format_size

STEP = "step"
MEMORY = "memory"
NOTICE = "notice"
EVAL = "eval"
FOOTPRINT = "footprint"
PHASE = "phase"
ROLLOUT = "rollout"
KINDS = (STEP, MEMORY, NOTICE, EVAL, FOOTPRINT, PHASE, ROLLOUT)

# A preference-tuning (DPO) step's own figures; an SFT step never carries them.
PREFERENCE_FIELDS = ("rewards_chosen", "rewards_rejected", "reward_margin", "reward_accuracy",
                     "logps_chosen", "logps_rejected")
# An online RL (GRPO) step's own figures; TRL's names less their prefixes.
RL_FIELDS = ("reward", "reward_std", "frac_reward_zero_std", "reward_means", "kl",
             "clip_ratio_low", "clip_ratio_high", "entropy", "completion_length",
             "completion_length_min", "completion_length_max", "clipped_ratio",
             "sampling_seconds", "scoring_seconds", "training_seconds")
# Carried only by the steps of the objective that has them.
OBJECTIVE_FIELDS = (*PREFERENCE_FIELDS, *RL_FIELDS)
STEP_FIELDS = ("step", "loss", "learning_rate", "grad_norm", "tokens_per_second",
               "step_seconds", "tokens", "mfu", "mfu_6n", *OBJECTIVE_FIELDS)
MEMORY_FIELDS = ("step", "host", "device", "allocated_mb", "reserved_mb", "peak_mb",
                 "peak_reserved_mb", "rss_mb")
NOTICE_FIELDS = ("level", "message")
EVAL_FIELDS = ("step", "eval_loss", "eval_tokens")
FOOTPRINT_FIELDS = ("step", "params_bytes", "grads_bytes", "optimizer_bytes")
ROLLOUT_FIELDS = ("step", "samples")
PHASE_FIELDS = ("phase", "state", "done", "total", "unit", "elapsed", "message")

DOWNLOAD = "download"
# The weights loading: bytes of the checkpoint as they land (tensors, when the checkpoint's
# sizes are unknown). Its name keeps the word jobs before it stored: "load_shards".
LOAD_SHARDS = "load_shards"
TOKENIZE = "tokenize"
COMPILE_OPS = "compile_ops"
PHASES = (DOWNLOAD, LOAD_SHARDS, TOKENIZE, COMPILE_OPS)
PHASE_START, PHASE_PROGRESS, PHASE_END, PHASE_FAILED = "start", "progress", "end", "failed"
PHASE_WORDS = {DOWNLOAD: "downloading", LOAD_SHARDS: "loading weights",
               TOKENIZE: "tokenizing", COMPILE_OPS: "compiling ops"}


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


def phase_text(event: dict[str, Any]) -> str:
    """One phase line in words, the one spelling the job page and the CLI show:
    "downloading model.safetensors · 1.2 GB / 3.4 GB · 12 s", "loading weights · 3.10 GB /
    13.5 GB · 40 s", "tokenizing · 500 / 2,000 records · 3 s", "compiling ops · 42 s"."""
    words = [PHASE_WORDS.get(event.get("phase"), str(event.get("phase")))]
    if event.get("message"):
        words[0] += f" {event['message']}"
    done, total, unit = event.get("done"), event.get("total"), event.get("unit")
    if isinstance(done, (int, float)):
        if unit == "bytes":
            amount = format_size(done / GB) + (f" / {format_size(total / GB)}" if total else "")
        else:
            amount = f"{done:,.0f}" + (f" / {total:,.0f}" if total else "")
            amount += f" {unit}" if unit else ""
        words.append(amount)
    if event.get("state") in (PHASE_END, PHASE_FAILED):
        words.append("done" if event["state"] == PHASE_END else "failed")
    if isinstance(event.get("elapsed"), (int, float)):
        words.append(f"{event['elapsed']:.0f} s")
    return " · ".join(words)
