"""The data preflight's report pieces that both of its reports share: the examples' report
(trainer/data/dataset_preflight.py) and the preference pairs' (trainer/data/pair_preflight.py).
A pair report counts a pair where the examples' report counts an example, so each piece
takes plain lists: token lengths, tokenized examples (a pair's two sides in a row), the
records' keys.
"""
from __future__ import annotations

import bisect
import math
import random
from collections import Counter
from typing import Any

from trainer.data.datasets import TokenizedExample, has_answer_tokens, truncate_example
from trainer.token_loss import IGNORE_INDEX

SAMPLE_SEED = 0
BINS_UP_TO_SEQ_LEN = 8  # histogram bins at or under seq_len; as many again above it
DUPLICATE_RECORDS_SHOWN = 5
TRAINED, PROMPT, CUT = "trained", "prompt", "cut"  # what a marked example's segment is
# A shown example's ids and mask stop here, and each run of its text keeps this many
# characters of either end: a report stays small at any seq_len.
SHOWN_TOKENS = 8192
SEGMENT_CHARS = 3000


def sample_indices(count: int, limit: int) -> list[int]:
    """Every index, or a seeded sample of `limit` of them in file order."""
    if count <= limit:
        return list(range(count))
    return sorted(random.Random(SAMPLE_SEED).sample(range(count), limit))


def sample_note(tokenized: int, records: int, limit: int) -> dict[str, Any]:
    return {"tokenized": tokenized, "sampled": tokenized < records, "limit": limit,
            "seed": SAMPLE_SEED}


def truncation_counts(whole: list[TokenizedExample], trained: list[TokenizedExample], *,
                      group: int = 1) -> dict[str, Any]:
    """Over seq_len, losing answer tokens (dropped ones included) and dropped, each a
    count and a share of the tokenized examples, or of their runs of `group` (a pair's two
    sides), one counted when any example in it is; and the answer tokens cut in all."""
    answer_tokens = [answer_token_count(item) for item in whole]
    kept_tokens = [answer_token_count(item) for item in trained]
    over = [len(item.input_ids) > len(cut.input_ids) for item, cut in zip(whole, trained)]
    losing = [kept < total for kept, total in zip(kept_tokens, answer_tokens)]
    dropped = [not has_answer_tokens(item) for item in trained]
    tokenized = len(whole) // group

    def counted(flags: list[bool]) -> dict[str, Any]:
        return share(sum(any(flags[i:i + group]) for i in range(0, len(flags), group)),
                     tokenized)

    return {"over_seq_len": counted(over),
            "lose_answer_tokens": counted(losing),
            "dropped_empty": counted(dropped),
            "answer_tokens": {"total": sum(answer_tokens),
                              "cut": sum(answer_tokens) - sum(kept_tokens)}}


def answer_token_count(item: TokenizedExample) -> int:
    return len(item.labels) - item.labels.count(IGNORE_INDEX)


def share(count: int, of: int) -> dict[str, Any]:
    return {"count": count, "share": count / of if of else 0.0}


def length_summary(lengths: list[int]) -> dict[str, Any]:
    ordered = sorted(lengths)
    if not ordered:
        return {}

    def percentile(fraction: float) -> int:
        return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]

    return {"min": ordered[0], "p50": percentile(0.5), "p90": percentile(0.9),
            "p99": percentile(0.99), "max": ordered[-1],
            "mean": round(sum(ordered) / len(ordered), 1)}


def length_histogram(lengths: list[int], seq_len: int) -> list[dict[str, Any]]:
    """Token counts in bins [low, high] (inclusive); seq_len is a bin's top, so each bin
    is wholly at or over it. The last bin is open (high None) past 2 x seq_len."""
    step = math.ceil(seq_len / BINS_UP_TO_SEQ_LEN)
    tops = [seq_len * k // BINS_UP_TO_SEQ_LEN for k in range(1, BINS_UP_TO_SEQ_LEN + 1)]
    tops += [seq_len + step * k for k in range(1, BINS_UP_TO_SEQ_LEN)]
    counts = Counter(bisect.bisect_left(tops, length) for length in lengths)
    lows = [0, *(top + 1 for top in tops)]
    return [{"low": low, "high": high, "count": counts[index], "over_seq_len": low > seq_len}
            for index, (low, high) in enumerate(zip(lows, [*tops, None]))]


def message_turns(messages: tuple[dict[str, str], ...]) -> list[tuple[str, str]]:
    """A conversation as (role, content) pairs: part of a record's duplicate key."""
    return [(m["role"], m["content"]) for m in messages]


def duplicates(keys: list[tuple]) -> dict[str, Any]:
    """Of each record's key (its prompt and answers): how many repeat an earlier one's, in
    how many groups, and the largest group's first record numbers (from 1)."""
    counts = Counter(keys)
    repeated = {key: count for key, count in counts.items() if count > 1}
    largest = max(repeated, key=repeated.get, default=None)
    records = ([number for number, key in enumerate(keys, 1) if key == largest]
               [:DUPLICATE_RECORDS_SHOWN] if largest is not None else [])
    return {"records": len(keys) - len(counts), "groups": len(repeated),
            "largest_group": {"count": repeated.get(largest, 0), "records": records}}


def marked_example(tokenizer, whole: TokenizedExample, seq_len: int, *, record: int,
                   why: str) -> dict[str, Any]:
    """One example token by token: the ids training sees and which of them the loss
    covers (from the truncated labels), and the text in runs of prompt, trained answer,
    and what seq_len cuts."""
    kept = truncate_example(whole, seq_len)
    trained = [label != IGNORE_INDEX for label in kept.labels]
    parts = [TRAINED if is_trained else PROMPT for is_trained in trained]
    parts += [CUT] * (len(whole.input_ids) - len(kept.input_ids))
    return {"record": record, "why": why, "tokens": len(whole.input_ids),
            "trained_tokens": sum(trained), "cut_tokens": parts.count(CUT),
            "token_ids": kept.input_ids[:SHOWN_TOKENS], "trained": trained[:SHOWN_TOKENS],
            "segments": _segments(tokenizer, whole.input_ids, parts)}


def _segments(tokenizer, token_ids: list[int], parts: list[str]) -> list[dict[str, str]]:
    """Runs of tokens of one part, each decoded whole (a lone byte-level token can be half
    a character)."""
    segments: list[dict[str, str]] = []
    start = 0
    for end in range(1, len(parts) + 1):
        if end == len(parts) or parts[end] != parts[start]:
            text = tokenizer.decode(token_ids[start:end], skip_special_tokens=False,
                                    clean_up_tokenization_spaces=False)
            segments.append({"part": parts[start], "text": _shortened(text)})
            start = end
    return segments


def _shortened(text: str) -> str:
    if len(text) <= 2 * SEGMENT_CHARS:
        return text
    left_out = len(text) - 2 * SEGMENT_CHARS
    return f"{text[:SEGMENT_CHARS]} [... {left_out} characters ...] {text[-SEGMENT_CHARS:]}"


def preflight_warnings(report: dict[str, Any]) -> list[str]:
    """What the report says a user should act on, in words (of pairs for objective dpo)."""
    warnings = []
    pairs = report.get("objective") == "dpo"
    seq_len, sample = report["seq_len"], report["sample"]
    of = f" of the sampled {'pairs' if pairs else 'examples'}" if sample["sampled"] else ""
    a_side = " of a side" if pairs else ""
    losing, dropped = report["lose_answer_tokens"], report["dropped_empty"]
    if losing["count"]:
        warnings.append(f"{losing['share']:.1%}{of} ({losing['count']}) lose answer tokens"
                        f"{a_side} at seq_len {seq_len}; seq_len {report['lengths']['p99']} "
                        f"keeps 99% {'of the answers ' if pairs else ''}whole, "
                        f"{report['lengths']['max']} all")
    if dropped["count"]:
        warnings.append(f"{dropped['count']}{of} keep no answer token{a_side} at seq_len "
                        f"{seq_len}: training drops them")
    same = report.get("same_answers")
    if same and same["count"]:
        warnings.append(f"{same['count']} pairs ({same['share']:.1%}) have the same chosen and "
                        "rejected answer: they compare nothing")
    duplicated = report["duplicates"]
    if duplicated["records"]:
        what = ("pairs repeat an earlier pair's prompt and answers (e.g. pairs" if pairs else
                "records repeat an earlier record's prompt and answer (e.g. records")
        warnings.append(f"{duplicated['records']} {what} "
                        f"{duplicated['largest_group']['records']})")
    return warnings
