"""Checks a job's model and dataset before any GPU is taken, naming the path at fault."""
from __future__ import annotations

from pathlib import Path

from tunedeck.dataset_records import load_file_examples
from tunedeck.job_spec import JobSpec

BUILTIN_MODELS = ("builtin:tiny-llama",)
BUILTIN_DATASETS = ("builtin:arithmetic",)
CHECKED_RECORDS = 1000


def looks_like_local_path(reference: str) -> bool:
    return reference.startswith(("/", "./", "../", "~")) or Path(reference).suffix != ""


def find_input_problems(spec: JobSpec) -> list[str]:
    return [problem for problem in (_model_problem(spec.model), _dataset_problem(spec.dataset))
            if problem]


def _model_problem(model: str) -> str | None:
    if model.startswith("builtin:"):
        return None if model in BUILTIN_MODELS else (
            f"model {model}: unknown built-in model; expected one of {', '.join(BUILTIN_MODELS)}")
    path = Path(model).expanduser()
    if not path.exists():
        if looks_like_local_path(model):
            return f"model {path}: no such folder; expected a Hugging Face model folder"
        return None  # a Hugging Face id; the trainer resolves it from the hub cache
    if not path.is_dir():
        return f"model {path}: is a file; expected a folder with config.json and weights"
    if not (path / "config.json").is_file():
        return f"model {path}: no config.json in the folder; expected a Hugging Face model folder"
    return None


def _dataset_problem(dataset: str) -> str | None:
    if dataset.startswith("builtin:"):
        return None if dataset in BUILTIN_DATASETS else (
            f"dataset {dataset}: unknown built-in dataset; expected one of "
            f"{', '.join(BUILTIN_DATASETS)}")
    try:
        # The first records show a wrong shape at once; the trainer reads the rest.
        load_file_examples(dataset, limit=CHECKED_RECORDS)
    except (OSError, ValueError) as error:
        return str(error)
    return None
