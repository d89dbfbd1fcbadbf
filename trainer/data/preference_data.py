"""Preference pairs (objective dpo) from wherever a spec names them: `builtin:arithmetic-
preference` (trainer/data/builtin_dataset.py), or any source tunedeck.data.sources reads (a
local file or folder, a Hugging Face id), read by `load_source_pairs` as the worker's input
check reads them, so both say the same thing about a bad dataset. The pairs' twin of
`load_examples`/`load_spec_examples` (trainer/data/datasets.py)."""
from __future__ import annotations

from pathlib import Path

from tunedeck.data.preference_records import PreferencePair, pairs_from_records
from tunedeck.data.records import builtin_dataset_problem
from tunedeck.data.sources import DatasetSource, load_source_pairs, spec_source

BUILTIN_PREFERENCE_DATASET = "builtin:arithmetic-preference"


def load_pairs(source: str | DatasetSource, *, field: str = "dataset",
               limit: int | None = None) -> list[PreferencePair]:
    """`builtin:arithmetic-preference`, or any source tunedeck.data.sources reads (a
    DatasetSource carries its config, split and columns); errors name the spec field, the
    source and the problem."""
    if isinstance(source, str):
        source = DatasetSource(source, field=field)
    if source.reference.startswith("builtin:"):
        return _builtin_pairs(source.reference, source.field)[:limit]
    return load_source_pairs(source, limit=limit)


def load_spec_pairs(spec, field: str = "dataset", *, cache_dir: Path | None = None,
                    limit: int | None = None) -> list[PreferencePair]:
    """The pairs of the spec's `dataset` or `eval_dataset`, with its config, split and
    columns (`cache_dir`: the `datasets` cache; None: HF_DATASETS_CACHE, which the worker
    sets for the ranks)."""
    return load_pairs(spec_source(spec, field, cache_dir=cache_dir), limit=limit)


def _builtin_pairs(reference: str, field: str) -> list[PreferencePair]:
    from trainer.data.builtin_dataset import arithmetic_preference_records

    if reference != BUILTIN_PREFERENCE_DATASET:  # unknown, or builtin:arithmetic's examples
        raise ValueError(builtin_dataset_problem(field, reference, objective="dpo"))
    return pairs_from_records(arithmetic_preference_records(), source=reference, field=field)
