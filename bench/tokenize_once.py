"""Tokenize once a job against once a rank: CPU seconds and memory of the data a job's ranks
need, for N prompt/response records with the built-in tokenizer.

Every rank used to read and tokenize the whole dataset itself (R ranks: R times the CPU, R
copies of the rows as Python lists); now the node's first rank tokenizes and writes int32
arrays that every rank memory-maps (trainer/data/tokenized_data.py). The reference, measured in
the same run, is one rank's tokenization: the figure is the CPU a job spends on its data
(once: tokenize + write + R opens; every rank: R x tokenize), as a ratio.

    .venv/bin/python bench/tokenize_once.py [--records 100000] [--ranks 8]
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

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.model.builtin_model import _WORDS, ensure_builtin_model  # noqa: E402
from trainer.model.model_source import load_tokenizer  # noqa: E402
from trainer.data.tokenized_data import read_tokenized, tokenize_example_splits, write_tokenized  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.units import MIB  # noqa: E402


def write_records(path: Path, count: int) -> Path:
    chooser = random.Random(0)
    with path.open("w", encoding="utf-8") as file:
        for _ in range(count):
            prompt = " ".join(chooser.choices(_WORDS, k=chooser.randint(5, 40)))
            response = " ".join(chooser.choices(_WORDS, k=chooser.randint(1, 60)))
            file.write(json.dumps({"prompt": prompt, "response": response}) + "\n")
    return path


def timed(function):
    started = time.process_time()
    result = function()
    return result, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, default=8)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokenize-once-") as folder:
        folder = Path(folder)
        tokenizer = load_tokenizer(str(ensure_builtin_model(folder / "home")))
        spec = JobSpec(dataset=str(write_records(folder / "records.jsonl", arguments.records)),
                       max_steps=1, seq_len=256)
        before_bytes = psutil.Process().memory_info().rss
        made, tokenize_seconds = timed(lambda: tokenize_example_splits(spec, tokenizer, ranks=arguments.ranks))
        # What a rank holds once it has tokenized: the records read and the rows as lists.
        rows_bytes = psutil.Process().memory_info().rss - before_bytes
        _, write_seconds = timed(lambda: write_tokenized(folder / "node-0", lambda: made))
        data, open_seconds = timed(lambda: read_tokenized(folder / "node-0"))
        _, read_all_seconds = timed(lambda: [data.train_rows[i] for i in range(len(data.train_rows))])
        array_bytes = sum(path.stat().st_size for path in (folder / "node-0").glob("*.npy"))
    ranks = arguments.ranks
    once = tokenize_seconds + write_seconds + ranks * open_seconds
    every_rank = ranks * tokenize_seconds
    print(f"{arguments.records:,} records, {len(data.train_rows):,} rows, {ranks} ranks, seq_len 256:")
    print(f"  reference, one rank tokenizing: {tokenize_seconds:.2f} CPU s, its memory grew "
          f"{rows_bytes / MIB:.0f} MiB (records and rows as Python lists)")
    print(f"  once: tokenize + write {tokenize_seconds + write_seconds:.2f} s, open per rank "
          f"{open_seconds * 1000:.1f} ms, every row read back {read_all_seconds:.2f} s "
          f"(spread over the epoch's steps); arrays {array_bytes / MIB:.1f} MiB, shared")
    print(f"  data CPU per job: once {once:.2f} s, every rank {every_rank:.2f} s; "
          f"once / every rank {once / every_rank:.3f}")
    print(f"  data memory per host: once {array_bytes / MIB:.1f} MiB (page cache), every "
          f"rank {ranks * rows_bytes / MIB:.0f} MiB; ratio {array_bytes / (ranks * rows_bytes):.4f}")
    print(f"  (host has {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
