"""A data preflight's answer in words: summary lines (the CLI and the form both show them),
and the whole report as terminal text for `tunedeck preflight`; a report of preference pairs
(objective dpo) in the same lines, said of pairs and of their two answers."""
from __future__ import annotations

from typing import Any

HISTOGRAM_WIDTH = 40  # characters of the longest bar
# How a marked example shows in a terminal: the trained answer and what seq_len cuts.
TRAINED_MARKS = ("[[", "]]")
CUT_MARKS = ("<<cut: ", ">>")
# What a report counts, in words: records and examples (sft), or pairs and their sides (dpo).
WORDS = {
    "sft": {"records": "records", "tokens": "prompt + answer tokens",
            "over_seq_len": "are longer than seq_len",
            "lose_answer_tokens": "lose answer tokens to truncation",
            "dropped_empty": "are dropped as empty (no answer token left)",
            "answer_tokens": "answer tokens cut",
            "duplicates": "duplicate records (identical prompt and answer)"},
    "dpo": {"records": "preference pairs", "tokens": "prompt + answer tokens of each side",
            "over_seq_len": "have a side longer than seq_len",
            "lose_answer_tokens": "lose answer tokens of a side to truncation",
            "dropped_empty": "are dropped (a side keeps no answer token)",
            "answer_tokens": "answer tokens cut (both sides)",
            "duplicates": "duplicate pairs (identical prompt and answers)"},
}


def prompt_summary_lines(report: dict[str, Any]) -> list[str]:
    """A report of prompts (objective grpo): their lengths against the room seq_len leaves
    beside the longest completion."""
    sample, lengths, room = report["sample"], report["lengths"], report["prompt_room"]
    over, cut = report["over_seq_len"], report["prompt_tokens_cut"]
    return [f"{report['records']} prompts"
            + (f"; a seeded sample of {sample['tokenized']} tokenized (seed {sample['seed']})"
               if sample["sampled"] else "; all tokenized"),
            f"prompt tokens: median {lengths['p50']}, p90 {lengths['p90']}, p99 "
            f"{lengths['p99']}, max {lengths['max']}",
            f"room for a prompt: {room} tokens (seq_len {report['seq_len']} less "
            f"max_completion_length {report['max_completion_length']})",
            f"{over['count']} ({over['share']:.1%}) are longer and lose their start "
            f"({cut['cut']} of {cut['total']} prompt tokens)",
            f"rewards read the columns: {', '.join(report['reward_columns']) or 'none'}",
            f"{report['duplicates']['records']} repeated prompts in "
            f"{report['duplicates']['groups']} groups"]


def summary_lines(report: dict[str, Any]) -> list[str]:
    if report.get("objective") == "grpo":
        return prompt_summary_lines(report)
    sample = report["sample"]
    seq_len = report["seq_len"]
    words = WORDS[report.get("objective", "sft")]
    lines = [f"{report['records']} {words['records']}"
             + (f"; a seeded sample of {sample['tokenized']} tokenized (seed {sample['seed']}): "
                "the shares below are the sample's" if sample["sampled"] else "; all tokenized")]
    lengths = report["lengths"]
    lines.append(f"{words['tokens']}: median {lengths['p50']}, p90 {lengths['p90']}, "
                 f"p99 {lengths['p99']}, max {lengths['max']} (seq_len {seq_len})")
    if "same_answers" in report:
        same = report["same_answers"]
        lines.append(f"{same['count']} ({same['share']:.1%}) have the same chosen and rejected "
                     "answer")
    for key in ("over_seq_len", "lose_answer_tokens", "dropped_empty"):
        lines.append(f"{report[key]['count']} ({report[key]['share']:.1%}) {words[key]}")
    answer = report["answer_tokens"]
    lines.append(f"{words['answer_tokens']}: {answer['cut']} of {answer['total']}")
    duplicates = report["duplicates"]
    lines.append(f"{duplicates['records']} {words['duplicates']} in "
                 f"{duplicates['groups']} groups")
    if report.get("packing"):
        lines.append(f"packing: {report['packing']['rows']} rows, "
                     f"{report['packing']['fill']:.0%} full")
    if report.get("eval_held_out"):
        held_out = "pairs" if report.get("objective") == "dpo" else "records"
        lines.append(f"eval_split holds out {report['eval_held_out']} {held_out}")
    return lines


def bin_label(bin_: dict[str, Any]) -> str:
    return f"{bin_['low']}-{bin_['high']}" if bin_["high"] is not None else f">= {bin_['low']}"


def preflight_as_text(answer: dict[str, Any]) -> str:
    """The answer of POST /api/datasets/preflight (or its GET) for a terminal."""
    if answer["status"] == "failed":
        return f"preflight {answer['id']} failed: {answer['error']}"
    if answer["status"] != "done":
        return f"preflight {answer['id']} is {answer['status']}: {answer.get('waiting') or ''}"
    report = answer["report"]
    lines = [f"preflight {answer['id']} of {answer['request']['dataset']} "
             f"(worker {answer['worker_name']}, {report['seconds']['total']:.1f} s):",
             *(f"  {line}" for line in summary_lines(report)), "", "token lengths:"]
    lines += histogram_lines(report["histogram"], report["seq_len"])
    for example in report["examples"]:
        lines += ["", f"record {example['record']} ({example['why']}): {example['tokens']} "
                      f"tokens, {example['trained_tokens']} trained {TRAINED_MARKS[0]}like this"
                      f"{TRAINED_MARKS[1]}, {example['cut_tokens']} cut by seq_len:",
                  marked_text(example)]
    lines += ["", *(f"warning: {warning}" for warning in report["warnings"])]
    return "\n".join(lines).rstrip()


def histogram_lines(histogram: list[dict[str, Any]], seq_len: int) -> list[str]:
    largest = max((bin_["count"] for bin_ in histogram), default=0) or 1
    labels = [bin_label(bin_) for bin_ in histogram]
    width = max(len(label) for label in labels)
    lines = []
    for label, bin_ in zip(labels, histogram):
        bar = "#" * round(HISTOGRAM_WIDTH * bin_["count"] / largest)
        over = "  over seq_len" if bin_["over_seq_len"] and bin_["count"] else ""
        lines.append(f"  {label.rjust(width)} {str(bin_['count']).rjust(7)} {bar}{over}")
        if bin_["high"] == seq_len:
            lines.append(f"  {'-' * width} seq_len {seq_len}")
    return lines


def marked_text(example: dict[str, Any]) -> str:
    marks = {"trained": TRAINED_MARKS, "cut": CUT_MARKS, "prompt": ("", "")}
    return "".join(f"{marks[segment['part']][0]}{segment['text']}{marks[segment['part']][1]}"
                   for segment in example["segments"])
