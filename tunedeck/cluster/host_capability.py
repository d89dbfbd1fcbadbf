"""Spec choices the registered workers cannot run, refused before the job is stored.

What the trainer refuses on a host without GPUs: DeepSpeed (backend zero2) with fp16 raises
"Type fp16 is not supported on your device" on its CPU accelerator, so the job would fail
only after it was queued. bf16 and fp32 run on CPU under ZeRO-2, so those are offered.
The GPU speed options (kernels liger, attention flash) need a GPU, and a package that each
worker's heartbeat says it has or not: refused when no worker that could take the job has
both (a worker that does not say, such as a Slurm executor, is given the benefit).
With no worker registered for the job there is nothing to judge: the job may wait for a
GPU worker, so nothing is refused."""
from __future__ import annotations

from typing import Sequence

from tunedeck.backends import backend_of
from tunedeck.cluster.placement import (SlurmPartitionView, WorkerView, has_speed_packages,
                                        serves)
from tunedeck.spec.job_spec import JobSpec
from tunedeck.units import GB, MIB


def host_problems(spec: JobSpec, workers: Sequence[WorkerView]) -> list[tuple[str, str]]:
    """(spec field, why and what to pick instead) for each choice no worker that could place
    the job can run; [] when one of them has GPUs or none is registered. A Slurm
    executor's job is held to its partition's nodes."""
    candidates = [worker for worker in workers if serves(worker, spec)]
    if not candidates:
        return []
    partitions = [worker.slurm for worker in candidates if worker.slurm is not None]
    if partitions and len(partitions) == len(candidates):
        return _partition_problems(spec, partitions)
    if not _all_without_gpus(candidates):
        return _missing_package_problems(spec, candidates)
    problems = []
    problems += _gpu_precision_problems(spec, "this host has no GPU")
    return problems + _no_gpu_speed_problems(spec, "this host has no GPU")


def cpu_workers_for(spec: JobSpec, workers: Sequence[WorkerView]) -> list[WorkerView]:
    """The workers that could take the job, when every one of them runs its ranks on the CPU
    (the hosts host_problems judges as having no GPU); [] when one has GPUs or is a Slurm
    executor, or none is registered (the job may wait for a GPU worker)."""
    candidates = [worker for worker in workers if serves(worker, spec)]
    return candidates if candidates and _all_without_gpus(candidates) else []


def _all_without_gpus(candidates: Sequence[WorkerView]) -> bool:
    return not any(worker.gpu_indices or worker.slurm for worker in candidates)


def ram_per_rank_gb(workers: Sequence[WorkerView], ranks_per_node: int) -> float | None:
    """The RAM one of `ranks_per_node` CPU ranks may use on the smallest of these hosts, GB
    (10^9 bytes); None when a heartbeat does not say its host's RAM."""
    sizes = [worker.memory_total_mb for worker in workers]
    if not sizes or None in sizes:
        return None
    return min(sizes) * MIB / GB / ranks_per_node


def _no_gpu_speed_problems(spec: JobSpec, where: str) -> list[tuple[str, str]]:
    return [(package.field, f"{where}: {package.field} {package.value} needs a CUDA GPU — "
                            f"set {package.field} to {JobSpec.model_fields[package.field].default}")
            for package in spec.speed_packages]


def _missing_package_problems(spec: JobSpec, candidates: Sequence[WorkerView]
                              ) -> list[tuple[str, str]]:
    """The speed options' packages no GPU worker able to take the job has, together (a
    worker that does not say what it has is given the benefit)."""
    with_gpus = [worker for worker in candidates if worker.gpu_indices or worker.slurm]
    if not spec.speed_packages or any(has_speed_packages(worker, spec) for worker in with_gpus):
        return []
    problems = []
    for package in spec.speed_packages:
        anywhere = any(package.import_name in (worker.speed_packages or ()) for worker in with_gpus)
        what = (f"no GPU worker that could take this job has {package.pip_name} installed"
                if not anywhere else
                f"no GPU worker that could take this job has "
                f"{' and '.join(other.pip_name for other in spec.speed_packages)} installed "
                f"together")
        problems.append((package.field, f"{package.field} {package.value}: {what} (pip install "
                                        f"{package.pip_name} on the GPU hosts and restart "
                                        f"their workers), or set {package.field} to "
                                        f"{JobSpec.model_fields[package.field].default}"))
    return problems


def _partition_problems(spec: JobSpec, partitions: Sequence[SlurmPartitionView]
                        ) -> list[tuple[str, str]]:
    """What none of the Slurm partitions that could take the job has room for, ever."""
    widest = max(partitions, key=lambda partition: (partition.nodes, partition.gpus_per_node))
    problems = []
    if all(spec.num_nodes > partition.nodes for partition in partitions):
        problems.append(("num_nodes", f"{spec.num_nodes} nodes asked for; Slurm partition "
                                      f"{widest.name} has {widest.nodes}"))
    if all(spec.num_gpus > _ranks_per_node(partition) for partition in partitions):
        what = (f"{widest.gpus_per_node} GPUs a node" if widest.gpus_per_node
                else f"no GPUs and {widest.cpus_per_node} CPUs a node (a rank a CPU)")
        problems.append(("num_gpus", f"{spec.num_gpus} a node asked for; Slurm partition "
                                     f"{widest.name} has {what}"))
    if not any(partition.gpus_per_node for partition in partitions):
        problems += _gpu_precision_problems(spec, f"Slurm partition {widest.name} has no GPU")
        problems += _no_gpu_speed_problems(spec, f"Slurm partition {widest.name} has no GPU")
    return problems


def _ranks_per_node(partition: SlurmPartitionView) -> int:
    return partition.gpus_per_node or partition.cpus_per_node


def _gpu_precision_problems(spec: JobSpec, where: str) -> list[tuple[str, str]]:
    """The spec's precision, where its backend needs a GPU for it (`where` has none)."""
    backend = backend_of(spec)
    problem = backend.cpu_precision_problem(spec.precision)
    return [("precision", f"{where}: {spec.precision} under {backend.title} needs one "
                          f"({problem}) — pick bf16 or fp32")] if problem else []
