"""A spec's local inputs as the web judges them before a job is stored, one code path for
submit (by field, a 422) and the New job form (each problem under its field as it is typed):
a path the principal may not name (app/auth/spec_access.py), a model folder without
config.json, and a dataset whose columns (read cheaply: tunedeck/data/columns.py) do not map,
with the spec's `columns`, to what its objective trains on: a prompt and a response (sft),
or a chosen and a rejected answer (dpo); a built-in dataset of the other objective's kind,
or an unknown one.

Only what exists here is judged: a path missing on the web host may exist on the worker's,
which checks it again before the job takes a GPU; the form notes it under its field
(`missing_here`) without refusing it."""
from __future__ import annotations

import os
from pathlib import Path

from app.auth.principal import Principal
from app.auth.spec_access import allowed_roots_for, spec_access_problems
from tunedeck.data.columns import peek_columns
from tunedeck.data.input_paths import PATH_FIELDS, is_local_reference, reference_problem
from tunedeck.data.records import builtin_dataset_problem, columns_problem
from tunedeck.data.prompt_records import reward_readers
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings

MODEL_CONFIG = "config.json"  # what makes a folder a Hugging Face model
PICK_COLUMNS = "in the form: the column pickers under Dataset config, split and columns"


def input_problems(spec: JobSpec, *, principal: Principal,
                   settings: Settings) -> list[tuple[str, str]]:
    """(field, message) for each input the principal may not name or the job could not
    read; each message names its field, its path and the fix."""
    problems = spec_access_problems(spec, principal=principal, settings=settings)
    refused = {field for field, _ in problems}
    if "model" not in refused:
        problems += [("model", message) for message in [_model_folder_problem(spec.model)]
                     if message]
    for field, split in (("dataset", spec.dataset_split),
                         ("eval_dataset", spec.eval_dataset_split)):
        reference = getattr(spec, field)
        if reference and field not in refused:
            message = _dataset_columns_problem(field, reference, split, spec)
            problems += [(field, message)] if message else []
    return problems


def parent_job_problems(spec: JobSpec, *, principal: Principal,
                        database) -> list[tuple[str, str]]:
    """("model", message) when `model: job:ID` names a job the principal may not read, or
    one that did not succeed (tunedeck/jobs/lineage.py)."""
    from tunedeck.jobs.lineage import find_job, parent_job_id, parent_problem

    job_id = parent_job_id(spec.model)
    if job_id is None:
        if spec.model.startswith("job:"):
            return [("model", f"model {spec.model}: expected job:ID, a job's number (job:12)")]
        return []
    with database.transaction() as session:
        parent = find_job(session, job_id)
        if parent is not None and not principal.may_see_job_of(parent.owner):
            parent = None  # another user's job reads as a missing one
        problem = parent_problem(parent, spec.model)
    return [("model", problem)] if problem else []


def reference_problems(references: dict[str, str], *, principal: Principal,
                       settings: Settings) -> list[tuple[str, str]]:
    """(field, message) for the model, dataset and eval_dataset references alone: the
    path rule and a model folder's config.json, for a form whose other fields do not yet
    make a spec."""
    roots = allowed_roots_for(principal, settings)
    problems = []
    for field, reference in references.items():
        message = reference and (reference_problem(field, reference, roots)
                                 or (_model_folder_problem(reference) if field == "model"
                                     else None))
        problems += [(field, message)] if message else []
    return problems


def missing_here(spec: JobSpec) -> dict[str, str]:
    """{field: note} for each local model or dataset path that this host does not have."""
    return {field: (f"{reference}: not found on this machine. A worker on another host "
                    "may have it; a worker here fails the job at once")
            for field in PATH_FIELDS
            if (reference := getattr(spec, field)) and is_local_reference(reference)
            and Path(reference).is_absolute() and not os.path.lexists(reference)}


def _model_folder_problem(reference: str) -> str | None:
    path = Path(reference)
    if not is_local_reference(reference) or not path.is_dir() or (path / MODEL_CONFIG).is_file():
        return None
    return (f"model {reference}: no {MODEL_CONFIG} in this folder; expected a Hugging Face "
            "model folder (config.json, the weights and the tokenizer files)")


def _dataset_columns_problem(field: str, reference: str, split: str, spec: JobSpec) -> str | None:
    readers = dict(reward_readers(spec))  # objective grpo: the columns its rewards read
    if reference.startswith("builtin:"):
        return builtin_dataset_problem(field, reference, objective=spec.objective,
                                       reward_columns=readers)
    if not is_local_reference(reference):
        return None
    try:
        names = peek_columns(reference, split=split)
    except (OSError, ValueError):
        return None  # unreadable here: the worker's check says why, naming the line
    problem = columns_problem(names, spec.columns, objective=spec.objective,
                              reward_columns=readers) if names else None
    if problem is None:
        return None
    return f"{field} {reference}: {problem}; {PICK_COLUMNS}"
