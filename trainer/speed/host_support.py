"""Whether this host can run a spec's speed options: pure rules over what the host has, so the
worker (before any GPU is taken) and each rank (before the weights load) refuse alike, with
the field and what to do instead. Which package each option needs is the spec's table
(tunedeck.spec.job_spec.SPEED_PACKAGES), which the web's check of the workers reads too."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable

from tunedeck.spec.job_spec import JobSpec


def package_installed(import_name: str) -> bool:
    """Found on the path, without importing it (flash_attn's import loads its CUDA library)."""
    return importlib.util.find_spec(import_name) is not None


def speed_option_problems(spec: JobSpec, *, cuda_available: bool,
                          installed: Callable[[str], bool] | None = None) -> list[str]:
    """A line per speed option this host cannot run, naming the spec field and the way out;
    [] when it can run them all (or none is asked for). The fused optimizer and
    padding-free batches run anywhere (torch's fused AdamW has a CPU kernel too)."""
    installed = installed or package_installed
    problems = []
    for package in spec.speed_packages:
        default = JobSpec.model_fields[package.field].default
        if not cuda_available:
            problems.append(f"{package.field} {package.value}: needs a CUDA GPU (its kernels are "
                            f"GPU code), and this host has none; set {package.field} to "
                            f"{default} to train here")
        elif not installed(package.import_name):
            problems.append(f"{package.field} {package.value}: {package.pip_name} is not "
                            f"installed on this host (pip install {package.pip_name} into the "
                            f"worker's environment), or set {package.field} to {default}")
    return problems


def check_host_runs(spec: JobSpec, *, cuda_available: bool) -> None:
    """Raise ValueError naming every option this host cannot run."""
    problems = speed_option_problems(spec, cuda_available=cuda_available)
    if problems:
        raise ValueError("; ".join(problems))
