"""Tokenize once a job, not once a rank: the first rank of each node reads, splits, tokenizes
(and packs) the data into the run folder as flat numpy arrays; every rank of the node then
memory-maps them.

Before, every rank tokenized the whole dataset itself: N ranks paid N times the CPU, and held
N copies of the token lists as Python ints (about 8 bytes a token each, plus the objects).
Memory-mapped int32 arrays are one copy in the page cache that every rank of the host shares.
Each node writes its own folder (`tokenized/node-K/`): a run folder is not always on a
filesystem every node sees, and when it is, a node never reads a half-written folder of
another's. Within a node the other ranks wait for the folder's manifest, not in a
collective, so however long tokenizing takes they do not time out; across nodes, the
row-count check that follows is a collective, under the process group's timeout. That check
fails the job by name when the nodes made different rows (a Hugging Face dataset that
changed between two nodes' downloads): they would run different step counts and hang. The
folder is removed once the job's weights are written.
"""
from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder

from tunedeck.metrics.events import TOKENIZE

from trainer.data.datasets import TokenizedExample, tokenize_all, has_answer_tokens
from trainer.data.eval_set import eval_source, load_train_and_eval_records
from trainer.data.packing import pack_examples
from trainer.startup.progress import Phase
from trainer.rank import RankContext
from trainer.telemetry import NullTelemetry

MANIFEST_FILE = "manifest.json"
WAIT_POLL_SECONDS = 0.05
SPLITS = ("train", "eval")


class TokenizedRows(Sequence):
    """Rows of a split, read on demand from the memory-mapped arrays (a row's lists are
    made when it is batched, never all at once)."""

    def __init__(self, folder: Path, split: str):
        import numpy as np

        self._offsets = np.load(folder / f"{split}-offsets.npy")
        self._input_ids = np.load(folder / f"{split}-input_ids.npy", mmap_mode="r")
        self._labels = np.load(folder / f"{split}-labels.npy", mmap_mode="r")
        positions = folder / f"{split}-position_ids.npy"
        self._position_ids = np.load(positions, mmap_mode="r") if positions.is_file() else None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):  # an eval shard: rows[rank::world_size]
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        start, end = self._offsets[index % len(self)], self._offsets[index % len(self) + 1]
        positions = None if self._position_ids is None else self._position_ids[start:end].tolist()
        return TokenizedExample(input_ids=self._input_ids[start:end].tolist(),
                                labels=self._labels[start:end].tolist(), position_ids=positions)


@dataclass(frozen=True)
class TokenizedData:
    train_rows: Sequence[TokenizedExample]
    eval_rows: Sequence[TokenizedExample]  # empty without an eval set
    train_examples: int  # before packing: what the "training started" notice counts
    seconds: float  # what reading, splitting and tokenizing took, once for the node


def tokenize_once(spec: JobSpec, tokenizer, run: RunFolder, *, context: RankContext,
                  telemetry=None, tokenize_splits: Callable[..., dict] | None = None
                  ) -> TokenizedData:
    """Every rank's data, tokenized by the node's first rank (see the module's docstring);
    `tokenize_splits` is the objective's (trainer/objectives/), supervised examples'
    by default."""
    tokenize_splits = tokenize_splits or tokenize_example_splits
    import torch.distributed as dist

    folder = run.tokenized_dir(node_rank=context.node_rank)
    if context.local_rank == 0:
        shutil.rmtree(folder, ignore_errors=True)  # a previous launch's (a resumed job)
    dist.barrier()  # nobody is still reading an old folder, nor looking for the new one yet
    if context.local_rank == 0:
        write_tokenized(folder, lambda: tokenize_splits(spec, tokenizer, ranks=context.world_size,
                                                       telemetry=telemetry))
    data = read_tokenized(wait_for_manifest(folder))
    check_nodes_agree(data, spec=spec, context=context)
    return data


def check_nodes_agree(data: TokenizedData, *, spec: JobSpec, context: RankContext) -> None:
    """Every rank must hold the same rows: one all-reduce of the row counts (max, and max of
    the negated counts for the min)."""
    import torch
    import torch.distributed as dist

    counts = [len(data.train_rows), len(data.eval_rows)]
    extremes = torch.tensor([*counts, *(-count for count in counts)], dtype=torch.float64,
                            device=context.device)
    dist.all_reduce(extremes, op=dist.ReduceOp.MAX)
    most_train, most_eval, least_train, least_eval = extremes.tolist()
    if (most_train, most_eval) != (-least_train, -least_eval):
        raise ValueError(f"dataset {spec.dataset}: the nodes read different data (train rows "
                         f"{-least_train:.0f} to {most_train:.0f}, eval rows {-least_eval:.0f} to "
                         f"{most_eval:.0f}); pin it (a local copy every node reads, or a "
                         "Hugging Face revision) and run the job again")


def remove_tokenized(run: RunFolder, *, context: RankContext) -> None:
    """The node's folder, once the job no longer reads it (its first rank removes it)."""
    if context.local_rank == 0:
        shutil.rmtree(run.tokenized_dir(node_rank=context.node_rank),
                      ignore_errors=True)


def tokenize_example_splits(spec: JobSpec, tokenizer, *, ranks: int, telemetry=None) -> dict:
    """{split: rows} and the train example count: the one path from records to rows.
    With `telemetry`, a "tokenize" phase counts the records (train and eval) done."""
    examples, eval_examples = load_train_and_eval_records(spec, ranks=ranks)
    train_rows, eval_rows = tokenize_train_and_eval(
        spec, examples, eval_examples, telemetry=telemetry,
        tokenize=lambda records, phase, source: _tokenize_in_chunks(
            tokenizer, records, spec.seq_len, phase=phase, source=source))
    if spec.packing:
        # The step count for `epochs` counts rows: packing makes fewer of them.
        train_rows = pack_examples(train_rows, spec.seq_len)
        eval_rows = pack_examples(eval_rows, spec.seq_len)
    return {"rows": {"train": train_rows, "eval": eval_rows}, "train_examples": len(examples)}


def tokenize_train_and_eval(spec: JobSpec, records: list, eval_records: list, *,
                            tokenize: Callable[[list, Phase, str], list],
                            telemetry=None) -> tuple[list, list]:
    """(train rows, eval rows): `tokenize(records, phase, source)` of each split under one
    "tokenize" phase counting the records of both; `source` names the split as errors do."""
    with Phase(telemetry or NullTelemetry(), TOKENIZE, total=len(records) + len(eval_records),
               unit="records") as phase:
        train = tokenize(records, phase, f"dataset {spec.dataset}")
        evaluated = tokenize(eval_records, phase, eval_source(spec)) if eval_records else []
    return train, evaluated


# Records a tokenizer call: big enough to keep its batching fast, small enough that a
# large dataset's bar moves every second or so.
TOKENIZE_CHUNK_RECORDS = 2000


def tokenize_in_chunks(records: list, tokenize: Callable[[list], list], *, phase: Phase,
                       chunk_records: int | None = None) -> list:
    """`tokenize` over the records a chunk at a time (TOKENIZE_CHUNK_RECORDS by default),
    the phase's bar moving with each."""
    chunk_records = chunk_records or TOKENIZE_CHUNK_RECORDS
    rows = []
    for start in range(0, len(records), chunk_records):
        chunk = records[start:start + chunk_records]
        rows.extend(tokenize(chunk))
        phase.advance(len(chunk))
    return rows


def _tokenize_in_chunks(tokenizer, examples, seq_len: int, *, phase: Phase, source: str):
    rows = tokenize_in_chunks(
        examples, lambda chunk: tokenize_all(tokenizer, chunk, seq_len, source=source),
        phase=phase)
    kept = [row for row in rows if has_answer_tokens(row)]
    if not kept:  # as tokenize_examples says it
        raise ValueError(f"{source}: every prompt fills seq_len={seq_len}; "
                         "no answer tokens are left to train on")
    return kept


def write_tokenized(folder: Path, tokenize: Callable[[], dict]) -> None:
    """Tokenize, write each split's arrays beside `folder`, then rename it into place; the
    manifest, written last, says it is whole."""
    import numpy as np

    started = time.perf_counter()
    tokenized = tokenize()
    staging = folder.with_name(f".{folder.name}-staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for split, rows in tokenized["rows"].items():
        lengths = [len(row.input_ids) for row in rows]
        np.save(staging / f"{split}-offsets.npy", np.cumsum([0, *lengths], dtype=np.int64))
        for name in ("input_ids", "labels", "position_ids"):
            if name == "position_ids" and (not rows or rows[0].position_ids is None):
                continue
            flat = np.fromiter(chain.from_iterable(getattr(row, name) for row in rows),
                               dtype=np.int32, count=sum(lengths))
            np.save(staging / f"{split}-{name}.npy", flat)
    manifest = {"train_examples": tokenized["train_examples"],
                "seconds": round(time.perf_counter() - started, 3),
                "rows": {split: len(rows) for split, rows in tokenized["rows"].items()}}
    (staging / MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")
    staging.rename(folder)


def wait_for_manifest(folder: Path) -> Path:
    """The node's folder once its first rank has renamed it into place. A first rank that
    fails ends the launch (torchrun stops every rank), so this waits no longer than that."""
    while not (folder / MANIFEST_FILE).is_file():
        time.sleep(WAIT_POLL_SECONDS)
    return folder


def read_tokenized(folder: Path) -> TokenizedData:
    manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    return TokenizedData(train_rows=TokenizedRows(folder, "train"),
                         eval_rows=TokenizedRows(folder, "eval"),
                         train_examples=manifest["train_examples"], seconds=manifest["seconds"])
