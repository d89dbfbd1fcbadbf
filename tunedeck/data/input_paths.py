"""Where a job may read from: the rule for a spec's model, dataset and eval_dataset.

A reference is either built in (`builtin:...`), a Hugging Face id (`org/name` or `name`),
or a local path. A local path must be absolute, hold no `..`, lie (symlinks resolved) inside
one of the allowed roots, and be a regular file or a folder (datasets) or a folder (models):
never a device, FIFO or socket; nothing in a dataset folder may link outside the roots. A path that does not exist here passes this rule (the worker, which
reads it, checks it again on its own host and reports a missing one).

Pure (os and pathlib only): the web checks a spec with it before storing the job, the worker
before it takes GPUs.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Iterable, Sequence

PATH_FIELDS = ("model", "dataset", "eval_dataset")
MODEL_FIELDS = ("model",)
HUB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
# A file name's suffix: "data/train.jsonl" is a relative file, "Qwen/Qwen2.5-0.5B" an id.
FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt", ".arrow", ".tsv", ".bin",
                 ".safetensors", ".gz", ".zip", ".tar")
ROOTS_SETTING = "TUNEDECK_ALLOWED_ROOTS"


def spec_path_problems(spec, allowed_roots: Sequence[Path]) -> list[tuple[str, str]]:
    """(field, message) for each of the spec's model, dataset and eval_dataset that breaks
    the rule."""
    problems = []
    for field in PATH_FIELDS:
        reference = getattr(spec, field)
        problem = reference_problem(field, reference, allowed_roots) if reference else None
        if problem:
            problems.append((field, problem))
    if spec.objective == "grpo":  # a Python reward's file, a reward model's folder
        from tunedeck.rewards.scorers import reward_paths

        for field, path in reward_paths(spec.grpo.rewards):
            problem = (reference_problem(field, path, allowed_roots) if Path(path).is_absolute()
                       else f"{field} {path}: not an absolute path. "
                            f"{_where_allowed(allowed_roots, field)}")
            if problem:
                problems.append((field, problem))
    return problems


def reference_problem(field: str, reference: str, allowed_roots: Sequence[Path]) -> str | None:
    """Why `reference` may not be read for `field`, or None. The message names the field,
    the path and the allowed roots."""
    if reference.startswith("builtin:"):
        return None
    if field in MODEL_FIELDS and reference.startswith("job:"):
        return None  # another job's weights: tunedeck/jobs/lineage.py judges the id
    if not is_local_reference(reference):
        if HUB_ID_PATTERN.match(reference):
            return None
        return (f"{field} {reference}: neither a Hugging Face id (org/name) nor an absolute "
                f"path. {_where_allowed(allowed_roots, field)}")
    path = Path(reference)
    if not path.is_absolute():
        return (f"{field} {reference}: not an absolute path; give an absolute path under an "
                f"allowed folder. {_where_allowed(allowed_roots, field)}")
    if ".." in path.parts:
        return (f"{field} {reference}: '..' is not allowed in a path. "
                f"{_where_allowed(allowed_roots, field)}")
    real = Path(os.path.realpath(path))
    if not _inside_any(real, allowed_roots):
        shown = reference if str(real) == reference else f"{reference} (resolves to {real})"
        return f"{field} {shown}: outside the allowed folders. {_where_allowed(allowed_roots, field)}"
    return _kind_problem(field, reference, real) or _folder_link_problem(field, reference, real,
                                                                         allowed_roots)


def is_local_reference(reference: str) -> bool:
    """A path (absolute, relative, or a name with a file suffix), not a Hugging Face id."""
    if reference.startswith(("/", "./", "../", "~", ".")) or "\\" in reference:
        return True
    if Path(reference).suffix.lower() in FILE_SUFFIXES:
        return True
    return os.path.lexists(reference)


def _inside_any(real: Path, allowed_roots: Iterable[Path]) -> bool:
    for root in allowed_roots:
        resolved_root = Path(os.path.realpath(root))
        if real == resolved_root or real.is_relative_to(resolved_root):
            return True
    return False


def _kind_problem(field: str, reference: str, real: Path) -> str | None:
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return None  # the worker reports a missing input, on the host that reads it
    except OSError as error:
        return f"{field} {reference}: cannot be read ({error.strerror})"
    if field in MODEL_FIELDS:
        return None if stat.S_ISDIR(mode) else (
            f"{field} {reference}: not a folder; expected a Hugging Face model folder")
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return (f"{field} {reference}: not a regular file (a device, FIFO or socket); expected a "
            "dataset file or folder")


def _folder_link_problem(field: str, reference: str, real: Path,
                         allowed_roots: Sequence[Path]) -> str | None:
    """A dataset folder's file that links outside the roots (the folder is read whole)."""
    if field in MODEL_FIELDS or not real.is_dir():
        return None
    for folder, names, files in os.walk(real):
        for name in (*names, *files):
            entry = Path(folder) / name
            if entry.is_symlink() and not _inside_any(Path(os.path.realpath(entry)), allowed_roots):
                return (f"{field} {reference}: {entry} links outside the allowed folders. "
                        f"{_where_allowed(allowed_roots, field)}")
    return None


def _where_allowed(allowed_roots: Sequence[Path], field: str) -> str:
    roots = ", ".join(str(root) for root in allowed_roots) or "none"
    allowed = f"Allowed folders: {roots} (an admin changes them with {ROOTS_SETTING})"
    if field in MODEL_FIELDS:
        return allowed
    # The upload is offered only where it helps: a model is not uploaded.
    return (f"{allowed}. A dataset file can be uploaded instead: the form's Upload button "
            "under the Dataset field, or POST /api/datasets")
