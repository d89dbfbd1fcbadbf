"""The data preflight on a large dataset: how long trainer.data.dataset_preflight takes for
`--records` jsonl records (default 100,000), against references measured in the same run.

The records are alpaca-like prompt/response pairs with a fixed seed: a tenth repeat an
earlier one, and `--long-share` (default 0.3) have answers well past `--seq-len` (default
256). Printed: the time to merely read the records (trainer.data.datasets.load_examples, the
first thing a job does), the time to tokenize the same sample as the trainer does at job
start (trainer.data.datasets.tokenize_examples), and the whole preflight (read, tokenize a
seeded sample of at most SAMPLE_LIMIT, count, render), with the tokenizer loaded once
before (a worker pays its load too: shown on their own lines, first and warm). All three run with the cyclic
garbage collector paused, as a rank reads its data and as the preflight does. Each figure
is the best of `--repeats`. The built-in model's tokenizer and chat template
(builtin:tiny-llama) are used.

Usage: .venv/bin/python bench/preflight.py [--records 100000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORDS = ("the model learns to answer each question briefly and well with numbers words "
         "facts steps reasons examples and a short summary at the end").split()


def write_records(path: Path, *, records: int, long_share: float, seq_len: int) -> None:
    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as file:
        for index in range(records):
            original = index if index < records * 0.9 else rng.randrange(int(records * 0.9))
            words = random.Random(original)
            # The built-in tokenizer makes about 3 tokens a word: a usual record is some
            # 60-250 tokens, a long one's answer alone about 1.5 x seq_len.
            answer_words = seq_len // 2 if words.random() < long_share else words.randrange(15, 60)
            record = {"instruction": " ".join(words.choices(WORDS, k=words.randrange(5, 15))),
                      "input": f"case {original}",
                      "output": " ".join(words.choices(WORDS, k=answer_words))}
            file.write(json.dumps(record) + "\n")


def best_seconds(action, repeats: int) -> tuple[tuple[float, float], object]:
    """((wall seconds, CPU seconds of this process's threads), result) of the best run:
    CPU time too, as a shared machine stretches wall time."""
    best, result = (float("inf"), float("inf")), None
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = action()
        best = min(best, (time.perf_counter() - started, time.process_time() - started_cpu))
    return best, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--long-share", type=float, default=0.3)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.environ.setdefault("TUNEDECK_HOME", folder)
        run(Path(folder), arguments)
    return 0


def run(folder: Path, arguments: argparse.Namespace) -> None:
    from tunedeck.spec.job_spec import JobSpec
    from trainer.data.dataset_preflight import (SAMPLE_LIMIT, collection_paused,
                                                preflight_report, spec_tokenizer)
    from trainer.data.preflight_figures import sample_indices
    from trainer.data.datasets import load_examples, tokenize_examples

    data = folder / "train.jsonl"
    write_records(data, records=arguments.records, long_share=arguments.long_share,
                  seq_len=arguments.seq_len)
    spec = JobSpec(dataset=str(data), seq_len=arguments.seq_len, max_steps=1)
    first_load_seconds, tokenizer = best_seconds(lambda: spec_tokenizer(spec), 1)
    tokenizer_seconds, tokenizer = best_seconds(lambda: spec_tokenizer(spec), arguments.repeats)
    with collection_paused():  # as a rank reads and tokenizes (trainer/startup/startup_gc.py)
        read_seconds, examples = best_seconds(lambda: load_examples(str(data)), arguments.repeats)
        sample = [examples[i] for i in sample_indices(len(examples), SAMPLE_LIMIT)]
        tokenize_seconds, _ = best_seconds(lambda: tokenize_examples(
            tokenizer, sample, spec.seq_len, source="dataset"), arguments.repeats)
    preflight_seconds, report = best_seconds(lambda: preflight_report(spec, tokenizer=tokenizer),
                                             arguments.repeats)
    print(f"{report['records']} records ({data.stat().st_size / 1e6:.1f} MB), "
          f"{report['sample']['tokenized']} tokenized (sampled: {report['sample']['sampled']}), "
          f"seq_len {spec.seq_len}, {report['lengths']['mean']:.0f} tokens a record on average; "
          f"best of {arguments.repeats}; wall s (CPU s)")
    for label, (wall, cpu) in (("load the tokenizer, first in a process [1]", first_load_seconds),
                               ("load the tokenizer (each preflight)", tokenizer_seconds),
                               ("read the records (load_examples)", read_seconds),
                               ("tokenize the sample (tokenize_examples)", tokenize_seconds),
                               ("the whole preflight (preflight_report)", preflight_seconds)):
        print(f"  {label:<44} {wall:7.3f} ({cpu:6.3f})")
    print(f"  preflight / reading: {preflight_seconds[0] / read_seconds[0]:.1f} x wall, "
          f"{preflight_seconds[1] / read_seconds[1]:.1f} x CPU; beyond reading and tokenizing: "
          f"{preflight_seconds[0] - read_seconds[0] - tokenize_seconds[0]:.2f} s")
    print(f"  found: {report['lose_answer_tokens']['share']:.1%} lose answer tokens, "
          f"{report['duplicates']['records']} duplicate records")
    print("  [1] imports transformers and, in a fresh TUNEDECK_HOME, builds builtin:tiny-llama:"
          " a worker's first preflight pays it once")

if __name__ == "__main__":
    sys.exit(main())
