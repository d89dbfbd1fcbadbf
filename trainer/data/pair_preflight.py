"""The data preflight of preference pairs (objective dpo): the figures of
trainer/data/preflight_figures.py, a pair counted (over seq_len, losing answer tokens,
dropped) when either of its sides is, and the share whose chosen answer equals the rejected
one; lengths are each side's. A pair is two examples to tokenize, so SAMPLE_LIMIT // 2 pairs
are."""
from __future__ import annotations

from tunedeck.data.preference_records import PreferencePair
from tunedeck.data.records import held_out_count
from tunedeck.spec.job_spec import JobSpec

from trainer.data.datasets import truncate_example
from trainer.data.preference_pairs import TokenizedPair, tokenize_pairs
from trainer.data.preflight_figures import (answer_token_count, duplicates, length_histogram,
                                            length_summary, marked_example, message_turns,
                                            preflight_warnings, sample_indices, sample_note,
                                            share, truncation_counts)


def pair_report(spec: JobSpec, tokenizer, pairs: list[PreferencePair],
                 sample_limit: int) -> dict:
    """The report of preference pairs: the examples' figures, a pair counted (over seq_len,
    losing answer tokens, dropped) when either of its sides is; lengths are each side's."""
    limit = max(1, sample_limit // 2)  # two answers a pair
    indices = sample_indices(len(pairs), limit)
    source = f"dataset {spec.dataset}"
    whole = tokenize_pairs(tokenizer, [pairs[i] for i in indices], None, source=source)
    sides = [side for pair in whole for side in (pair.chosen, pair.rejected)]
    trained = [truncate_example(side, spec.seq_len) for side in sides]
    lengths = [len(side.input_ids) for side in sides]
    report = {
        "objective": "dpo",
        "records": len(pairs),
        "sample": sample_note(len(indices), len(pairs), limit),
        "seq_len": spec.seq_len,
        "lengths": length_summary(lengths),
        "histogram": length_histogram(lengths, spec.seq_len),
        **truncation_counts(sides, trained, group=2),
        "same_answers": share(sum(pair.same_answers for pair in pairs), len(pairs)),
        "duplicates": duplicates([(pair.chosen, pair.rejected,
                                   *message_turns(pair.prompt_messages)) for pair in pairs]),
        "examples": _shown_pairs(tokenizer, pairs, indices, whole, spec.seq_len, source),
        "packing": None,
        "eval_held_out": held_out_count(len(pairs), spec.eval_split) if spec.eval_split else 0,
    }
    report["warnings"] = preflight_warnings(report)
    return report


def _shown_pairs(tokenizer, pairs: list[PreferencePair], indices: list[int],
                 whole: list[TokenizedPair], seq_len: int, source: str) -> list[dict]:
    """Both answers of the first pair, and the first tokenized answer seq_len cuts."""
    first = whole[0] if indices[0] == 0 else tokenize_pairs(tokenizer, pairs[:1], None,
                                                             source=source)[0]
    shown = [marked_example(tokenizer, side, seq_len, record=1,
                            why=f"the first pair's {name} answer")
             for name, side in (("chosen", first.chosen), ("rejected", first.rejected))]
    for index, pair in zip(indices, whole):
        for name, side in (("chosen", pair.chosen), ("rejected", pair.rejected)):
            if answer_token_count(truncate_example(side, seq_len)) < answer_token_count(side):
                if index != 0:
                    shown.append(marked_example(
                        tokenizer, side, seq_len, record=index + 1,
                        why=f"the first pair whose {name} answer seq_len cuts"))
                return shown
    return shown
