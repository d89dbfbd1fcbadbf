"""The data preflight: what training will make of a dataset, before a GPU is taken.

Records are read by the trainer's own `load_examples` and tokenized by its own
`tokenize_all`, `truncate_example` and `has_answer_tokens`, so the marked answer span is
the labels the loss covers and the truncation counts are those a job would meet: an
example "loses answer tokens" when seq_len cuts some of its answer, and is "dropped" (as
`tokenize_examples` drops it) when none is left.

Every record is read and counted, and duplicates are found among all of them; above
SAMPLE_LIMIT records a seeded sample of that many is tokenized, and the report says so.

For objective dpo the records are preference pairs (read by `load_spec_pairs`, as the
trainer reads them; tokenized by `tokenize_pairs`; trainer/data/pair_preflight.py): the report
counts pairs, the share whose chosen answer equals the rejected one, and, per pair, the shares
where a side is over seq_len, loses answer tokens, or keeps none (`trainable_pairs` drops
those); token lengths are each side's. A pair is two examples to tokenize, so
SAMPLE_LIMIT // 2 pairs are. For objective grpo the records are prompts
(trainer/data/prompt_preflight.py): their lengths against the room seq_len leaves beside
the longest completion. The pieces the reports share are trainer/data/preflight_figures.py's.
"""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tunedeck.data.records import Example, held_out_count
from tunedeck.data.sources import spec_source
from tunedeck.spec.job_spec import JobSpec

from trainer.data.datasets import (TokenizedExample, tokenize_all, has_answer_tokens, load_examples,
                                   truncate_example)
from trainer.data.packing import pack_examples
from trainer.data.pair_preflight import pair_report
from trainer.data.preference_data import load_spec_pairs
from trainer.data.prompt_data import load_spec_prompts
from trainer.data.prompt_preflight import prompt_report
from trainer.data.preflight_figures import (answer_token_count, duplicates, length_histogram,
                                            length_summary, marked_example, message_turns,
                                            preflight_warnings, sample_indices, sample_note,
                                            truncation_counts)

# Examples tokenized at most: the trainer's tokenizing takes about 0.3 ms an example
# (0.4 ms of CPU; bench/preflight.py), so 10,000 keep a 100k-record preflight to some
# 5 s, and a share measured on them is within about 1 point of the whole file's (95%).
SAMPLE_LIMIT = 10_000


def preflight_report(spec: JobSpec, *, tokenizer=None, cache_dir: Path | None = None,
                     sample_limit: int = SAMPLE_LIMIT) -> dict[str, Any]:
    """The report's JSON. `tokenizer` defaults to the spec's model's (as the trainer loads
    it); ValueError or OSError naming the field for data that cannot be read."""
    started = time.perf_counter()
    with collection_paused():
        if spec.objective == "dpo":
            records = load_spec_pairs(spec, cache_dir=cache_dir)
        elif spec.objective == "grpo":
            records = load_spec_prompts(spec, cache_dir=cache_dir)
        else:
            records = load_examples(spec_source(spec, "dataset", cache_dir=cache_dir))
        read_seconds = time.perf_counter() - started
        if tokenizer is None:
            tokenizer = spec_tokenizer(spec)
        build = {"sft": example_report, "dpo": pair_report,
                 "grpo": prompt_report}[spec.objective]
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


def example_report(spec: JobSpec, tokenizer, examples: list[Example],
                   sample_limit: int) -> dict:
    """The report of supervised examples (objective sft)."""
    indices = sample_indices(len(examples), sample_limit)
    source = f"dataset {spec.dataset}"
    whole = tokenize_all(tokenizer, [examples[i] for i in indices], None, source=source)
    trained = [truncate_example(item, spec.seq_len) for item in whole]
    report = {
        "objective": "sft",
        "records": len(examples),
        "sample": sample_note(len(indices), len(examples), sample_limit),
        "seq_len": spec.seq_len,
        "lengths": length_summary([len(item.input_ids) for item in whole]),
        "histogram": length_histogram([len(item.input_ids) for item in whole], spec.seq_len),
        **truncation_counts(whole, trained),
        "duplicates": duplicate_records(examples),
        "examples": _shown_examples(tokenizer, examples, indices, whole, spec.seq_len, source),
        "packing": _packing_note(trained, spec) if spec.packing else None,
        "eval_held_out": held_out_count(len(examples), spec.eval_split) if spec.eval_split else 0,
    }
    report["warnings"] = preflight_warnings(report)
    return report


def spec_tokenizer(spec: JobSpec):
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


def duplicate_records(examples: list[Example]) -> dict[str, Any]:
    """Records whose prompt and answer repeat an earlier record's: how many, in how many
    groups, and the largest group's first record numbers (from 1)."""
    # A list, not a generator, inside: a fifth of the time on 100k records.
    return duplicates([(example.response, *message_turns(example.prompt_messages))
                       for example in examples])


def _shown_examples(tokenizer, examples: list[Example], indices: list[int],
                    whole: list[TokenizedExample], seq_len: int, source: str) -> list[dict]:
    """The first record, and the first tokenized one whose answer seq_len cuts."""
    first = whole[0] if indices[0] == 0 else tokenize_all(tokenizer, examples[:1], None,
                                                           source=source)[0]
    shown = [marked_example(tokenizer, first, seq_len, record=1, why="the first record")]
    for index, item in zip(indices, whole):
        if answer_token_count(truncate_example(item, seq_len)) < answer_token_count(item):
            if index != 0:
                shown.append(marked_example(tokenizer, item, seq_len, record=index + 1,
                                            why="the first record whose answer seq_len cuts"))
            break
    return shown


def _packing_note(trained: list[TokenizedExample], spec: JobSpec) -> dict[str, Any]:
    """Packed rows of the tokenized examples the trainer keeps, and how full they are."""
    rows = pack_examples([item for item in trained if has_answer_tokens(item)], spec.seq_len)
    tokens = sum(len(row.input_ids) for row in rows)
    fill = round(tokens / (len(rows) * spec.seq_len), 4) if rows else 0.0
    return {"rows": len(rows), "fill": fill}


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
