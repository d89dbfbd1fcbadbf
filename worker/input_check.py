"""Checks a job's model, dataset and eval set before any GPU is taken, naming the path (or
the spec field) at fault. The data is read as the spec's objective trains on it: examples
(sft), or preference pairs (dpo)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from trainer.data.builtin_dataset import (ARITHMETIC_PREFERENCE_SIZE, ARITHMETIC_RL_SIZE,
                                          ARITHMETIC_SIZE)
from trainer.model.model_source import model_folder
from trainer.speed.host_support import speed_option_problems
from trainer.model.target_preview import family_of, model_family_problem
from tunedeck.backends import backend_of
from tunedeck.data.input_paths import spec_path_problems
from tunedeck.data.records import builtin_dataset_problem, eval_split_problem
from tunedeck.data.sources import (count_source_records, load_source_examples, load_source_pairs,
                                   load_source_prompts, spec_source)
from tunedeck.jobs.failure_kinds import offline_cache_advice
from tunedeck.spec.job_spec import JobSpec
from tunedeck.settings import Settings

BUILTIN_MODELS = ("builtin:tiny-llama",)
BUILTIN_DATASET_SIZES = {"builtin:arithmetic": ARITHMETIC_SIZE,
                         "builtin:arithmetic-preference": ARITHMETIC_PREFERENCE_SIZE,
                         "builtin:arithmetic-rl": ARITHMETIC_RL_SIZE}
# How each objective reads a dataset's records, and what it calls them.
LOADERS = {"sft": load_source_examples, "dpo": load_source_pairs, "grpo": load_source_prompts}
RECORD_WORDS = {"sft": "examples", "dpo": "pairs", "grpo": "prompts"}
CHECKED_RECORDS = 1000


@dataclass(frozen=True)
class TrainerInputs:
    """The spec the trainer is handed, with the folders its inputs may also lie in: a
    `job:ID` model becomes that job's merged folder (tunedeck/jobs/lineage.py), which the
    job may read wherever the parent's run folder is; `problem` when it cannot."""

    spec: JobSpec
    extra_roots: tuple[Path, ...] = ()
    problem: str | None = None


def trainer_inputs(spec: JobSpec, *, database, settings: Settings) -> TrainerInputs:
    from tunedeck.jobs.lineage import parent_weights
    from tunedeck.rewards.scorers import python_reward_problems

    if spec.objective == "grpo":
        refused = python_reward_problems(spec.grpo.rewards, allowed=settings.python_rewards)
        if refused:
            return TrainerInputs(spec, problem="; ".join(message for _field, message in refused))

    with database.transaction() as session:
        folder, problem = parent_weights(session, spec.model, runs_dir_for=settings.run_dir_for)
    if problem:
        return TrainerInputs(spec, problem=problem)
    if folder is None:
        return TrainerInputs(spec)
    if not (folder / "config.json").is_file():
        return TrainerInputs(spec, problem=f"model {spec.model}: its merged weights are not on "
                                           f"this host ({folder}): the worker that ran it keeps "
                                           "them in its run folder")
    return TrainerInputs(spec.model_copy(update={"model": str(folder)}), extra_roots=(folder,))


def looks_like_local_path(reference: str) -> bool:
    return reference.startswith(("/", "./", "../", "~")) or Path(reference).suffix != ""


def worker_input_roots(settings: Settings, owner: str | None) -> tuple[Path, ...]:
    """Where a job may read its model and data on this host: the worker's allowed roots, and
    the uploads folder of the job's owner. A job with no owner was submitted with open
    access (loopback, no accounts: everyone is admin), so every upload is allowed to it."""
    owner_uploads = (settings.upload_dir_for(owner),) if owner else (settings.uploads_dir,)
    return (*settings.allowed_root_paths, *owner_uploads)


def find_input_problems(spec: JobSpec, *, cuda_available: bool | None = None,
                        allowed_roots: Sequence[Path] | None = None,
                        datasets_cache: Path | None = None) -> list[str]:
    """`cuda_available` defaults to what this host's ranks will see (`host_has_cuda`).
    With `allowed_roots` (`worker_input_roots`), a local path outside them is refused before
    anything is read from it. A dataset the `datasets` library reads is read (fetched, for a
    Hugging Face id the hub cache lacks) into `datasets_cache`, the ranks' HF_DATASETS_CACHE."""
    if allowed_roots is not None:
        path_problems = [message for _field, message in spec_path_problems(spec, allowed_roots)]
        if path_problems:
            return path_problems
    dataset_problem = _dataset_problem(spec, cache_dir=datasets_cache)
    problems = [host_problem(spec, cuda_available=cuda_available),
                *_speed_problems(spec, cuda_available=cuda_available),
                _model_problem(spec.model) or model_family_problem(spec), dataset_problem,
                _dataset_problem(spec, field="eval_dataset", cache_dir=datasets_cache)
                if spec.eval_dataset else None,
                None if dataset_problem else _eval_split_problem(spec, cache_dir=datasets_cache)]
    return [problem for problem in problems if problem]


@functools.cache
def host_has_cuda() -> bool:
    """The ranks' own test (trainer.rank picks cuda or cpu with it). Torch is imported only
    for a spec whose answer matters, so most checks never pay for it."""
    import torch

    return torch.cuda.is_available()


def host_problem(spec: JobSpec, *, cuda_available: bool | None = None) -> str | None:
    """A spec that trains on a GPU host but cannot on this CPU-only one."""
    problem = backend_of(spec).cpu_precision_problem(spec.precision)
    if problem is None:
        return None
    if cuda_available is None:
        cuda_available = host_has_cuda()
    if cuda_available:
        return None
    # DeepSpeed's engine refuses fp16 at startup ("Type fp16 is not supported on your
    # device") when its CPU accelerator reports no fp16, i.e. unless oneDNN has fp16
    # kernels (AVX512-FP16/AMX-FP16 CPUs, where fp16 ZeRO-2 is untested, so refused too).
    # tests/trainer/test_precision_matrix.py shows the failure this check saves a launch.
    return (f"precision {spec.precision} under {spec.backend} needs a CUDA GPU: {problem} on "
            "this host and its engine refuses to start; use bf16 (or fp32) on CPU hosts, or "
            "backend fsdp, which runs fp16 with loss scaling on CPU")


def _speed_problems(spec: JobSpec, *, cuda_available: bool | None) -> list[str]:
    """The speed options this host cannot run (trainer/speed/host_support.py); torch is
    asked about CUDA only when the spec has one of them on."""
    if not spec.speed_packages:
        return []
    if cuda_available is None:
        cuda_available = host_has_cuda()
    problems = speed_option_problems(spec, cuda_available=cuda_available)
    if not problems and spec.kernels == "liger":
        problems = [_liger_family_problem(spec)]
    return [problem for problem in problems if problem]


def _liger_family_problem(spec: JobSpec) -> str | None:
    """A local model folder whose family Liger does not patch (a hub id's family is known
    once the ranks fetch its config: they check it before the weights load)."""
    if not Path(spec.model).expanduser().is_dir():
        return None
    from trainer.speed.liger import liger_family_problem, liger_model_types

    family = family_of(spec.model)
    return None if family == "unknown family" else liger_family_problem(family, liger_model_types())


def _model_problem(model: str) -> str | None:
    if model.startswith("builtin:"):
        return None if model in BUILTIN_MODELS else (
            f"model {model}: unknown built-in model; expected one of {', '.join(BUILTIN_MODELS)}")
    path = Path(model).expanduser()
    if not path.exists():
        if looks_like_local_path(model):
            return f"model {path}: no such folder; expected a Hugging Face model folder"
        return _hub_model_problem(model)  # a Hugging Face id: fetched, or read from the cache
    if not path.is_dir():
        return f"model {path}: is a file; expected a folder with config.json and weights"
    if not (path / "config.json").is_file():
        return f"model {path}: no config.json in the folder; expected a Hugging Face model folder"
    return None


def _hub_model_problem(model: str) -> str | None:
    """A Hugging Face id this host can neither read from its hub cache nor fetch."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE or model_folder(model) is not None:
        return None
    return f"model {model}: " + offline_cache_advice(model, hub_cache=constants.HF_HUB_CACHE)


def _dataset_problem(spec: JobSpec, *, field: str = "dataset",
                     cache_dir: Path | None = None) -> str | None:
    dataset = getattr(spec, field)
    if dataset.startswith("builtin:"):
        return builtin_dataset_problem(field, dataset, objective=spec.objective,
                                       reward_columns=dict(spec_source(spec).reward_columns))
    try:
        # The first records show a wrong shape at once; the trainer reads the rest.
        LOADERS[spec.objective](spec_source(spec, field, cache_dir=cache_dir),
                                limit=CHECKED_RECORDS)
    except (OSError, ValueError) as error:
        return str(error)
    return None


def _eval_split_problem(spec: JobSpec, *, cache_dir: Path | None = None) -> str | None:
    """The trainer's own rule, on the record count (it checks again on what it tokenizes)."""
    if spec.eval_split == 0:
        return None
    if spec.dataset.startswith("builtin:"):
        record_count = BUILTIN_DATASET_SIZES[spec.dataset]
    else:
        try:
            record_count = count_source_records(spec_source(spec, cache_dir=cache_dir))
        except (OSError, ValueError) as error:
            return str(error)
    problem = eval_split_problem(record_count, fraction=spec.eval_split,
                                 micro_batch_size=spec.micro_batch_size, ranks=spec.world_size,
                                 what=RECORD_WORDS[spec.objective])
    return f"{problem} (dataset {spec.dataset})" if problem else None
