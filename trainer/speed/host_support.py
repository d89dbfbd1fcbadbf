"""Whether this host can run a spec's speed options: pure rules over what the host has, so the
worker (before any GPU is taken) and each rank (before the weights load) refuse alike, with
the field and what to do instead."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable

from tunedeck.job_spec import JobSpec

# The spec's option -> (the import name that must be present, the pip name that brings it).
SPEED_PACKAGES = {"kernels": ("liger_kernel", "liger-kernel"),
                  "attention": ("flash_attn", "flash-attn")}


def package_installed(import_name: str) -> bool:
    """Found on the path, without importing it (flash_attn's import loads its CUDA library)."""
    return importlib.util.find_spec(import_name) is not None


def speed_option_problems(spec: JobSpec, *, cuda_available: bool,
                          installed: Callable[[str], bool] = package_installed) -> list[str]:
    """A line per speed option this host cannot run, naming the spec field and the way out;
    [] when it can run them all (or none is asked for). The fused optimizer and
    padding-free batches run anywhere (torch's fused AdamW has a CPU kernel too)."""
    asked = {"kernels": spec.kernels == "liger", "attention": spec.attention == "flash"}
    problems = []
    for field, wanted in asked.items():
        if not wanted:
            continue
        value = getattr(spec, field)
        import_name, pip_name = SPEED_PACKAGES[field]
        if not cuda_available:
            problems.append(f"{field} {value}: needs a CUDA GPU (its kernels are GPU code), and "
                            f"this host has none; set {field} to "
                            f"{JobSpec.model_fields[field].default} to train here")
        elif not installed(import_name):
            problems.append(f"{field} {value}: {pip_name} is not installed on this host "
                            f"(pip install {pip_name} into the worker's environment), or set "
                            f"{field} to {JobSpec.model_fields[field].default}")
    return problems


def check_host_runs(spec: JobSpec, *, cuda_available: bool) -> None:
    """Raise ValueError naming every option this host cannot run."""
    problems = speed_option_problems(spec, cuda_available=cuda_available)
    if problems:
        raise ValueError("; ".join(problems))
