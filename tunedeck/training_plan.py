"""What the trainer makes of a spec beyond its steps (those are tunedeck/training_steps.py's):
the model it loads and what it optimises. The trainer runs these functions and the preview
shows their answers (tunedeck/launch_config.py's `trainer_settings`), so the form shows what
the ranks will do rather than a description of it that could drift:

- the kernels `kernels: auto` runs on a host (`auto_kernels`: trainer/speed/options.py asks
  it for the rank's own host, the memory planner for a GPU worker, the preview for a GPU
  worker and a CPU host), with the reason in words;
- the attention implementation and the quantization the model loads with (train.py hands
  `attention_implementation` and `quantization_config` to the loader);
- the objective's settings as the loss reads them.

What a host contributes arrives as a `Host` of plain values and functions, so the module
stays pure: no I/O, no environment, no heavy import (the web imports it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from tunedeck.backends.base import TORCH_DTYPE_NAMES
from tunedeck.spec.job_spec import JobSpec

# The spec's attention -> transformers' attn_implementation.
ATTENTION_IMPLEMENTATIONS = {"sdpa": "sdpa", "flash": "flash_attention_2"}
# `kernels: auto` turns Liger on for these methods: on one H200 it made LoRA 20-38% faster
# and 22-27% leaner (bench/results/). A full fine-tune joins once a GPU run shows Liger's
# full path training as the plain one does.
AUTO_LIGER_METHODS = ("lora", "qlora")
# The families the memory planner counts that liger-kernel 0.8.5 patches (its
# MODEL_TYPE_TO_APPLY_LIGER_FN; a test holds this to the installed Liger's table). A rank asks
# the installed Liger itself; the planner and the preview, which import no torch, ask this.
LIGER_FAMILIES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe",
                            "gemma", "gemma2", "deepseek_v2", "deepseek_v3"})


def quantization_config(spec: JobSpec) -> dict[str, Any] | None:
    """QLoRA's bitsandbytes 4-bit settings (Hugging Face `BitsAndBytesConfig` keywords)."""
    if spec.method != "qlora":
        return None
    return {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
        "bnb_4bit_compute_dtype": TORCH_DTYPE_NAMES[spec.precision],
    }


def attention_implementation(spec: JobSpec) -> str | None:
    """transformers' attn_implementation for the spec's attention kernel; None for sdpa,
    transformers' own default (which leaves the eager path to a family without sdpa)."""
    return ATTENTION_IMPLEMENTATIONS[spec.attention] if spec.attention != "sdpa" else None


class KernelsChoice(NamedTuple):
    kernels: str  # "liger" or "none"
    why: str


@dataclass(frozen=True)
class Host:
    """What a host contributes to the kernels it runs. The model's family and Liger's are
    functions, asked only once the host and the method qualify: a rank's answers read the
    model's config and import Liger."""

    cuda_available: bool
    liger_installed: bool
    model_type: Callable[[], str]
    liger_families: Callable[[], frozenset[str]] = lambda: LIGER_FAMILIES


def gpu_worker(model_type: str) -> Host:
    """A GPU worker as the web sees one: a CUDA GPU, and liger-kernel (the worker extra
    installs it)."""
    return Host(cuda_available=True, liger_installed=True, model_type=lambda: model_type)


def cpu_host(model_type: str) -> Host:
    return Host(cuda_available=False, liger_installed=False, model_type=lambda: model_type)


def auto_kernels(method: str, host: Host) -> KernelsChoice:
    """What `kernels: auto` runs on `host`, and why."""
    if not host.cuda_available:
        return KernelsChoice("none", "no CUDA GPU on this host (Liger's kernels are GPU code)")
    if method not in AUTO_LIGER_METHODS:
        return KernelsChoice("none", (
            f"a {method} fine-tune stays on the plain path until a GPU run shows Liger's "
            "full path training as the plain one does; set kernels to liger to use it anyway"))
    if not host.liger_installed:
        return KernelsChoice("none", ("liger-kernel is not installed on this host (pip install "
                                      "liger-kernel, or the worker extra on a GPU host)"))
    family = host.model_type()
    if family not in host.liger_families():
        return KernelsChoice("none", f"Liger Kernel has no kernels for model family {family!r}")
    return KernelsChoice("liger", f"Liger Kernel for {method} on a {family} model on a CUDA GPU")


def kernels_on(spec: JobSpec, host: Host) -> KernelsChoice:
    """The kernels a rank on `host` runs: the spec's, or what `auto` resolves to."""
    if spec.kernels != "auto":
        return KernelsChoice(spec.kernels, "the spec names them")
    return auto_kernels(spec.method, host)


def objective_settings(spec: JobSpec) -> dict[str, Any]:
    """The objective, and for dpo its loss and reference as the trainer reads them (the SFT
    term's weight resolved, what the loss does not read left out); for grpo its section,
    the upper clip resolved."""
    if spec.objective == "grpo":
        return {"objective": "grpo", "grpo": {**spec.grpo.model_dump(mode="json"),
                                              "epsilon_high": spec.grpo.upper_clip}}
    if spec.objective != "dpo":
        return {"objective": spec.objective}
    preference = {**spec.dpo.model_dump(mode="json"), "sft_weight": spec.dpo.sft_term_weight}
    if not spec.dpo.uses_reference:
        preference.pop("reference")
    if spec.dpo.loss != "sigmoid":
        preference.pop("label_smoothing")
    if spec.dpo.loss != "simpo":
        preference.pop("simpo_gamma")
    return {"objective": "dpo", "dpo": preference}


def kernels_preview(spec: JobSpec) -> dict[str, Any]:
    """The spec's kernels; for auto, what a GPU worker and a CPU host resolve it to, and
    why."""
    if spec.kernels != "auto":
        return {"spec": spec.kernels, "runs": spec.kernels}
    family = _model_family_known_here(spec.model)
    if family is None:
        on_gpu = _on_a_gpu_of_unknown_family(spec)
    else:
        on_gpu = kernels_on(spec, gpu_worker(family))._asdict()
    return {"spec": "auto", "gpu_worker": on_gpu,
            "cpu_host": kernels_on(spec, cpu_host(family or "unknown"))._asdict()}


def _on_a_gpu_of_unknown_family(spec: JobSpec) -> dict[str, str]:
    """A model whose family only its config.json says, which a worker reads: what auto runs
    on a GPU worker for a family Liger patches, or the same answer for every family."""
    patched = kernels_on(spec, gpu_worker(sorted(LIGER_FAMILIES)[0]))
    if patched.kernels == "none":  # the method already rules Liger out
        return patched._asdict()
    return {"kernels": "liger or none",
            "why": (f"liger if the model's family is one Liger patches "
                    f"({', '.join(sorted(LIGER_FAMILIES))}), else none: the worker reads the "
                    "family from the model's config.json")}


def _model_family_known_here(model: str) -> str | None:
    """The built-in model's or a bundled model's family (the planner's table), without
    reading a file; None for any other model."""
    from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA
    from tunedeck.planner.shape_source import known_shape

    if model == BUILTIN_TINY_LLAMA.name:
        return BUILTIN_TINY_LLAMA.model_type
    shape = known_shape(model)
    return shape.model_type if shape is not None else None
