"""The data preflight: what training will make of a dataset, before a GPU is taken.

Records are read by the trainer's own `load_examples` and tokenized by its own
`tokenize_all`, `truncate_example` and `has_answer_tokens`, so the marked answer span is
the labels the loss covers and the truncation counts are those a job would meet: an
example "loses answer tokens" when seq_len cuts some of its answer, and is "dropped" (as
`tokenize_examples` drops it) when none is left.

Every record is read and counted, and duplicates are found among all of them; above
SAMPLE_LIMIT records a seeded sample of that many is tokenized, and the report says so.

For objective dpo the records are preference pairs (read by `load_spec_pairs`, as the trainer
reads them; tokenized by `tokenize_pairs`; trainer/data/pair_preflight.py): the report counts pairs, the share whose chosen
answer equals the rejected one, and, per pair, the shares where a side is over seq_len, loses
answer tokens, or keeps none (`trainable_pairs` drops those); token lengths are each side's.
A pair is two examples to tokenize, so SAMPLE_LIMIT // 2 pairs are.
"""
from __future__ import annotations

import bisect
import gc
import math
import random
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tunedeck.data.records import Example, held_out_count
from tunedeck.data.sources import spec_source
from tunedeck.spec.job_spec import JobSpec

from trainer.token_loss import IGNORE_INDEX
from trainer.data.datasets import (TokenizedExample, tokenize_all, has_answer_tokens, load_examples,
                                   truncate_example)
from trainer.data.packing import pack_examples
from trainer.data.preference_data import load_spec_pairs

# Examples tokenized at most: the trainer's tokenizing takes about 0.3 ms an example
# (0.4 ms of CPU; bench/preflight.py), so 10,000 keep a 100k-record preflight to some
# 5 s, and a share measured on them is within about 1 point of the whole file's (95%).
SAMPLE_LIMIT = 10_000
SAMPLE_SEED = 0
BINS_UP_TO_SEQ_LEN = 8  # histogram bins at or under seq_len; as many again above it
DUPLICATE_RECORDS_SHOWN = 5
TRAINED, PROMPT, CUT = "trained", "prompt", "cut"  # what a marked example's segment is
# A shown example's ids and mask stop here, and each run of its text keeps this many
# characters of either end: a report stays small at any seq_len.
SHOWN_TOKENS = 8192
SEGMENT_CHARS = 3000


def preflight_report(spec: JobSpec, *, tokenizer=None, cache_dir: Path | None = None,
                     sample_limit: int = SAMPLE_LIMIT) -> dict[str, Any]:
    """The report's JSON. `tokenizer` defaults to the spec's model's (as the trainer loads
    it); ValueError or OSError naming the field for data that cannot be read."""
    started = time.perf_counter()
    with collection_paused():
        if spec.objective == "dpo":
            records = load_spec_pairs(spec, cache_dir=cache_dir)
        else:
            records = load_examples(spec_source(spec, "dataset", cache_dir=cache_dir))
        read_seconds = time.perf_counter() - started
        if tokenizer is None:
            tokenizer = _spec_tokenizer(spec)
        # Pairs have a module of their own (it reads this one's helpers).
        from trainer.data.pair_preflight import pair_report

        build = pair_report if spec.objective == "dpo" else _report
        report = build(spec, tokenizer, records, sample_limit)
    report["seconds"] = {"read": round(read_seconds, 3),
                         "total": round(time.perf_counter() - started, 3)}
    return report


@contextmanager
def collection_paused():
    """The cyclic garbage collector off meanwhile (as a rank reads its data: trainer/
    startup_gc.py): 100k records are some 500,000 objects, which every full collection
    walks again, a third of the preflight's CPU time; reference counting still frees
    them. Process-wide, so only for these seconds; another thread's pause may overlap."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _report(spec: JobSpec, tokenizer, examples: list[Example], sample_limit: int) -> dict:
    indices = _sample_indices(len(examples), sample_limit)
    source = f"dataset {spec.dataset}"
    whole = tokenize_all(tokenizer, [examples[i] for i in indices], None, source=source)
    trained = [truncate_example(item, spec.seq_len) for item in whole]
    report = {
        "objective": "sft",
        "records": len(examples),
        "sample": _sample_note(len(indices), len(examples), sample_limit),
        "seq_len": spec.seq_len,
        "lengths": _length_summary([len(item.input_ids) for item in whole]),
        "histogram": length_histogram([len(item.input_ids) for item in whole], spec.seq_len),
        **_truncation_counts(whole, trained),
        "duplicates": duplicate_records(examples),
        "examples": _shown_examples(tokenizer, examples, indices, whole, spec.seq_len, source),
        "packing": _packing_note(trained, spec) if spec.packing else None,
        "eval_held_out": held_out_count(len(examples), spec.eval_split) if spec.eval_split else 0,
    }
    report["warnings"] = preflight_warnings(report)
    return report


def _spec_tokenizer(spec: JobSpec):
    """The model's tokenizer as the trainer loads it, but never with the model's own code:
    the preflight runs in a long-lived process (a worker's, next to its database
    credentials), not in a job's ranks."""
    from trainer.model.model_source import load_tokenizer, resolve_model_source

    try:
        return load_tokenizer(resolve_model_source(spec.model), trust_remote_code=False)
    except (OSError, ValueError) as error:
        needs_code = (" (the preflight never runs a model's own code, which trust_remote_code "
                      "allows a job)" if spec.trust_remote_code else "")
        raise ValueError(f"model {spec.model}: its tokenizer cannot be loaded{needs_code}: "
                         f"{error}") from error


def _sample_indices(count: int, limit: int) -> list[int]:
    """Every index, or a seeded sample of `limit` of them in file order."""
    if count <= limit:
        return list(range(count))
    return sorted(random.Random(SAMPLE_SEED).sample(range(count), limit))


def _sample_note(tokenized: int, records: int, limit: int) -> dict[str, Any]:
    return {"tokenized": tokenized, "sampled": tokenized < records, "limit": limit,
            "seed": SAMPLE_SEED}


def _truncation_counts(whole: list[TokenizedExample], trained: list[TokenizedExample], *,
                       group: int = 1) -> dict[str, Any]:
    """Over seq_len, losing answer tokens (dropped ones included) and dropped, each a
    count and a share of the tokenized examples, or of their runs of `group` (a pair's two
    sides), one counted when any example in it is; and the answer tokens cut in all."""
    answer_tokens = [_answer_token_count(item) for item in whole]
    kept_tokens = [_answer_token_count(item) for item in trained]
    over = [len(item.input_ids) > len(cut.input_ids) for item, cut in zip(whole, trained)]
    losing = [kept < total for kept, total in zip(kept_tokens, answer_tokens)]
    dropped = [not has_answer_tokens(item) for item in trained]
    tokenized = len(whole) // group

    def counted(flags: list[bool]) -> dict[str, Any]:
        return _share(sum(any(flags[i:i + group]) for i in range(0, len(flags), group)),
                      tokenized)

    return {"over_seq_len": counted(over),
            "lose_answer_tokens": counted(losing),
            "dropped_empty": counted(dropped),
            "answer_tokens": {"total": sum(answer_tokens),
                              "cut": sum(answer_tokens) - sum(kept_tokens)}}


def _answer_token_count(item: TokenizedExample) -> int:
    return len(item.labels) - item.labels.count(IGNORE_INDEX)


def _share(count: int, of: int) -> dict[str, Any]:
    return {"count": count, "share": count / of if of else 0.0}


def _length_summary(lengths: list[int]) -> dict[str, Any]:
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


def duplicate_records(examples: list[Example]) -> dict[str, Any]:
    """Records whose prompt and answer repeat an earlier record's: how many, in how many
    groups, and the largest group's first record numbers (from 1)."""
    # A list, not a generator, inside: a fifth of the time on 100k records.
    return _duplicates([(example.response, *_turns(example.prompt_messages))
                        for example in examples])


def _turns(messages: tuple[dict[str, str], ...]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


def _duplicates(keys: list[tuple]) -> dict[str, Any]:
    """Of each record's key (its prompt and answers): how many repeat an earlier one's, in
    how many groups, and the largest group's first record numbers (from 1)."""
    counts = Counter(keys)
    repeated = {key: count for key, count in counts.items() if count > 1}
    largest = max(repeated, key=repeated.get, default=None)
    records = ([number for number, key in enumerate(keys, 1) if key == largest]
               [:DUPLICATE_RECORDS_SHOWN] if largest is not None else [])
    return {"records": len(keys) - len(counts), "groups": len(repeated),
            "largest_group": {"count": repeated.get(largest, 0), "records": records}}


def _shown_examples(tokenizer, examples: list[Example], indices: list[int],
                    whole: list[TokenizedExample], seq_len: int, source: str) -> list[dict]:
    """The first record, and the first tokenized one whose answer seq_len cuts."""
    first = whole[0] if indices[0] == 0 else tokenize_all(tokenizer, examples[:1], None,
                                                           source=source)[0]
    shown = [marked_example(tokenizer, first, seq_len, record=1, why="the first record")]
    for index, item in zip(indices, whole):
        if _answer_token_count(truncate_example(item, seq_len)) < _answer_token_count(item):
            if index != 0:
                shown.append(marked_example(tokenizer, item, seq_len, record=index + 1,
                                            why="the first record whose answer seq_len cuts"))
            break
    return shown


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


def _packing_note(trained: list[TokenizedExample], spec: JobSpec) -> dict[str, Any]:
    """Packed rows of the tokenized examples the trainer keeps, and how full they are."""
    rows = pack_examples([item for item in trained if has_answer_tokens(item)], spec.seq_len)
    tokens = sum(len(row.input_ids) for row in rows)
    fill = round(tokens / (len(rows) * spec.seq_len), 4) if rows else 0.0
    return {"rows": len(rows), "fill": fill}


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
    duplicates = report["duplicates"]
    if duplicates["records"]:
        what = ("pairs repeat an earlier pair's prompt and answers (e.g. pairs" if pairs else
                "records repeat an earlier record's prompt and answer (e.g. records")
        warnings.append(f"{duplicates['records']} {what} "
                        f"{duplicates['largest_group']['records']})")
    return warnings


def answer(request: dict) -> dict:
    """A preflight server's answer to `{"spec", "cache_dir"}`: the report, or {"error": ...}
    naming the field for data that cannot be read."""
    try:
        cache_dir = Path(request["cache_dir"]) if request.get("cache_dir") else None
        return preflight_report(JobSpec.model_validate(request["spec"]), cache_dir=cache_dir)
    except (OSError, ValueError) as error:
        return {"error": str(error)}


def main() -> int:
    """`--serve`: answer preflights a line each, for a worker (worker/dataset_preflight.py),
    in a process of their own: a dataset too big for memory ends this process, never the
    worker and the jobs it supervises."""
    from tunedeck.services.line_server import serve_lines

    serve_lines(answer)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
