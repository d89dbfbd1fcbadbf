"""The eval set: a separate file (`eval_dataset`) or a seeded `eval_split` of the dataset,
held out here, when the records are read and before any training batch exists, so a held-out
example never trains; and each rank's share of its rows in micro-batches.

trainer/evaluation.py scores what this holds out; the objectives lay its rows out
(trainer/objectives/).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tunedeck.data.records import eval_split_problem, split_eval_examples
from tunedeck.spec.job_spec import JobSpec

from trainer.data.datasets import TokenizedExample, load_spec_examples
from trainer.token_loss import IGNORE_INDEX


def load_train_and_eval_records(spec: JobSpec, *, ranks: int,
                                load: Callable[..., list] = load_spec_examples,
                                what: str = "examples") -> tuple[list, list]:
    """(training records, eval records); the latter empty when the spec has no eval.
    `load(spec, field=...)` reads a spec field's records (examples by default, the
    preference pairs with `what="pairs"`)."""
    records = load(spec)
    if spec.eval_dataset is not None:
        return records, load(spec, field="eval_dataset")
    problem = eval_split_problem(len(records), fraction=spec.eval_split,
                                 micro_batch_size=spec.micro_batch_size, ranks=ranks, what=what)
    if problem:
        raise ValueError(f"{problem} (dataset {spec.dataset})")
    if spec.eval_split == 0:
        return records, []
    return split_eval_examples(records, fraction=spec.eval_split, seed=spec.seed)


def eval_source(spec: JobSpec) -> str:
    """How errors about the eval set name it."""
    if spec.eval_dataset is not None:
        return f"eval_dataset {spec.eval_dataset}"
    return f"eval_split {spec.eval_split} of dataset {spec.dataset}"


def rank_eval_batches(rows: Sequence[TokenizedExample], *, micro_batch_size: int, rank: int,
                      world_size: int) -> list[list[TokenizedExample]]:
    """This rank's share of the eval rows, in micro-batches. Every rank gets the same number
    of micro-batches: an FSDP forward gathers parameters, a collective all ranks must join.
    A rank whose share runs out first scores a filler row with no labels (no loss, no tokens)."""
    share = rows[rank::world_size]
    batch_count = math.ceil(math.ceil(len(rows) / world_size) / micro_batch_size)
    batches = [share[start:start + micro_batch_size]
               for start in range(0, len(share), micro_batch_size)]
    filler = TokenizedExample(input_ids=rows[0].input_ids,
                              labels=[IGNORE_INDEX] * len(rows[0].labels),
                              position_ids=rows[0].position_ids)
    return batches + [[filler]] * (batch_count - len(batches))
