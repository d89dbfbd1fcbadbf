"""Prompts (objective grpo) from wherever a spec names them: `builtin:arithmetic-rl`
(trainer/data/builtin_dataset.py), or any source tunedeck.data.sources reads, read by
`load_source_prompts` as the worker's input check reads them, with the columns the spec's
rewards read. The prompts' twin of `load_spec_examples` and `load_spec_pairs`."""
from __future__ import annotations

from pathlib import Path

from tunedeck.data.prompt_records import PromptRecord, prompts_from_records
from tunedeck.data.records import builtin_dataset_problem
from tunedeck.data.sources import load_source_prompts, spec_source

def load_spec_prompts(spec, field: str = "dataset", *, cache_dir: Path | None = None,
                      limit: int | None = None) -> list[PromptRecord]:
    source = spec_source(spec, field, cache_dir=cache_dir)
    if not source.reference.startswith("builtin:"):
        return load_source_prompts(source, limit=limit)
    readers = dict(source.reward_columns)
    problem = builtin_dataset_problem(field, source.reference, objective="grpo",
                                      reward_columns=readers)
    if problem:
        raise ValueError(problem)
    # Any built-in's records are prompts (each has one); the rewards pick the columns.
    return prompts_from_records(builtin_records(source.reference)[:limit],
                                source=source.reference, field=field, reward_columns=readers)


def builtin_records(reference: str) -> list[dict[str, str]]:
    from trainer.data import builtin_dataset

    if reference == "builtin:arithmetic":
        return [{"prompt": prompt, "response": response}
                for prompt, response in builtin_dataset.arithmetic_pairs()]
    if reference == "builtin:arithmetic-preference":
        return builtin_dataset.arithmetic_preference_records()
    return builtin_dataset.arithmetic_rl_records()
