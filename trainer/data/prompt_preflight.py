"""The data preflight of prompts (objective grpo): how long the prompts are under the
training template, against the room seq_len leaves beside the longest completion
(seq_len − grpo.max_completion_length), how many lose their start to it (the trainer keeps
a prompt's end: the question and the turn it is answered in), and repeated prompts. Read
by `load_spec_prompts` and tokenized by `tokenize_prompts`, as the trainer reads and
tokenizes them, so a report counts what a job would meet."""
from __future__ import annotations

from typing import Any

from tunedeck.data.prompt_records import PromptRecord
from tunedeck.spec.job_spec import JobSpec

from trainer.data.preflight_figures import (duplicates, length_histogram, length_summary,
                                            message_turns, sample_indices, sample_note, share)


def prompt_report(spec: JobSpec, tokenizer, prompts: list[PromptRecord],
                  sample_limit: int) -> dict[str, Any]:
    from trainer.objectives.grpo import prompt_room, tokenize_prompts

    room = prompt_room(spec)
    indices = sample_indices(len(prompts), sample_limit)
    whole = tokenize_prompts(tokenizer, [prompts[index] for index in indices], room=10**9)
    lengths = [len(row.input_ids) for row in whole]
    cut = [length > room for length in lengths]
    report = {
        "objective": "grpo",
        "records": len(prompts),
        "sample": sample_note(len(indices), len(prompts), sample_limit),
        "seq_len": spec.seq_len,
        "prompt_room": room,
        "max_completion_length": spec.grpo.max_completion_length,
        "lengths": length_summary(lengths),
        "histogram": length_histogram(lengths, room),
        "over_seq_len": share(sum(cut), len(whole)),
        "prompt_tokens_cut": {"total": sum(lengths),
                              "cut": sum(max(0, length - room) for length in lengths)},
        "duplicates": duplicates([tuple(message_turns(prompt.prompt_messages))
                                  for prompt in prompts]),
        "reward_columns": list(spec.grpo.reward_columns),
        "examples": [],
        "packing": None,
        "eval_held_out": 0,
    }
    warnings = []
    if report["over_seq_len"]["count"]:
        warnings.append(f"{report['over_seq_len']['count']} prompts are longer than the "
                        f"{room} tokens seq_len {spec.seq_len} leaves beside "
                        f"max_completion_length {spec.grpo.max_completion_length}: they lose "
                        f"their start; seq_len {report['lengths']['max'] + spec.grpo.max_completion_length} "
                        "keeps them all whole")
    if report["duplicates"]["records"]:
        warnings.append(f"{report['duplicates']['records']} prompts repeat an earlier one")
    report["warnings"] = warnings
    return report
