"""The speed options as train() meets them: `kernels: auto` made liger or none for this
host (by tunedeck/training_plan.py's rule, which the preview shows), checked before the
weights load, Liger's patches before the method's adapter, and where the loss is taken. The
attention kernel the model loads with is the plan's `attention_implementation`."""
from __future__ import annotations

from collections.abc import Callable

from tunedeck.spec.job_spec import JobSpec
from tunedeck.training_plan import Host, auto_kernels

from trainer.rank import RankContext
from trainer.speed.host_support import check_host_runs, package_installed
from trainer.speed.liger import apply_liger_kernels, liger_family_problem, liger_model_types


def resolve_auto_kernels(spec: JobSpec, model_source: str, *, context: RankContext,
                         installed: Callable[[str], bool] = package_installed
                         ) -> tuple[JobSpec, str | None]:
    """The spec with `kernels: auto` replaced by what this host runs (every rank decides
    alike: the same image on every GPU host of a job), and the sentence that says which
    and why; a spec that names its kernels is returned as it is, with None."""
    if spec.kernels != "auto":
        return spec, None
    host = Host(cuda_available=context.uses_cuda, liger_installed=installed("liger_kernel"),
                model_type=lambda: model_type_of(model_source, spec),
                liger_families=liger_model_types)
    choice, why = auto_kernels(spec.method, host)
    return spec.model_copy(update={"kernels": choice}), f"kernels auto: {choice} ({why})"


def check_speed_options(spec: JobSpec, model_source: str, *, context: RankContext) -> None:
    """Refuse, before any weight is loaded, what this rank cannot run: a GPU option on a CPU
    rank, a package missing, a model family Liger has no kernels for."""
    check_host_runs(spec, cuda_available=context.uses_cuda)
    if spec.kernels == "liger":
        problem = liger_family_problem(model_type_of(model_source, spec), liger_model_types())
        if problem:
            raise ValueError(problem)


def model_type_of(model_source: str, spec: JobSpec) -> str:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_source, trust_remote_code=spec.trust_remote_code)
    return config.model_type


def loss_in_model(spec: JobSpec) -> bool:
    """Whether the model takes the labels and returns the loss (Liger's fused linear
    cross-entropy never makes the logits the trainer would otherwise take it from)."""
    return spec.kernels == "liger"


def apply_kernels(base_model, spec: JobSpec) -> None:
    if spec.kernels == "liger":
        apply_liger_kernels(base_model)
