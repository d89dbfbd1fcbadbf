"""Who this worker is on the cluster, and what it has: its name, host, the job queues it
serves, the GPUs it hands out (read once at start), and their live state for heartbeats.

A job's GPUs are stored as positions in this worker's GPU list; `cuda_visible_devices`
turns them back into the ids CUDA knows (an index, or a GPU-/MIG- UUID).
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import psutil

from tunedeck.cluster.placement import WorkerView
from tunedeck.spec.sections import SPEED_PACKAGES
from tunedeck.settings import Settings
from tunedeck.units import MIB
from trainer.speed.host_support import package_installed
from worker.sampler import JobSampler, load_nvml, visible_gpu_ids


# The jobs a Slurm executor follows at once by default (each a thread that mostly sleeps).
SLURM_JOBS_FOLLOWED = 32


@dataclass(frozen=True)
class WorkerIdentity:
    name: str
    host: str
    queues: tuple[str, ...]
    # The GPUs this worker hands out, as CUDA ids; None on a host without GPUs.
    gpu_ids: tuple[int | str, ...] | None
    concurrency: int
    # How other hosts reach this one (node 0 of a job on several nodes hosts its
    # rendezvous here); None: the host name.
    reachable_at: str | None = None
    # The speed options' packages the ranks can import (tunedeck.spec.job_spec.SPEED_PACKAGES);
    # None: not known here (a Slurm executor's ranks run in its nodes' environment).
    speed_packages: frozenset[str] | None = None

    @classmethod
    def from_settings(cls, settings: Settings,
                      environ: Mapping[str, str] | None = None) -> "WorkerIdentity":
        environ = os.environ if environ is None else environ
        host = socket.gethostname()
        queues = tuple(settings.worker_queue_list)
        if settings.executor == "slurm":
            # A login node: Slurm grants the GPUs; a thread follows each job it submitted.
            gpu_ids, concurrency = None, settings.worker_concurrency or SLURM_JOBS_FOLLOWED
            speed_packages = None
        else:
            gpu_ids = discover_gpu_ids(settings.worker_gpus, environ)
            concurrency = settings.worker_concurrency or max(1, len(gpu_ids or ()))
            # Looked up once: installing a package means restarting the worker anyway.
            speed_packages = installed_speed_packages()
        # Broker queue names (the embedded broker's files) allow letters, digits and . _ - only.
        return cls(name=settings.worker_name or f"{host}-{'-'.join(queues)}", host=host,
                   queues=queues, gpu_ids=gpu_ids, concurrency=concurrency,
                   reachable_at=settings.worker_address, speed_packages=speed_packages)

    @property
    def address(self) -> str:
        return self.reachable_at or self.host

    @property
    def view(self) -> WorkerView:
        positions = None if self.gpu_ids is None else tuple(range(len(self.gpu_ids)))
        return WorkerView(name=self.name, host=self.host, queues=self.queues,
                          gpu_indices=positions, concurrency=self.concurrency,
                          speed_packages=self.speed_packages)

    def cuda_visible_devices(self, positions: Sequence[int] | None) -> str | None:
        """The CUDA_VISIBLE_DEVICES of a job holding `positions` (None on a host without
        GPUs, or for a job given none)."""
        if self.gpu_ids is None or not positions:
            return None
        return ",".join(str(self.gpu_ids[position]) for position in positions)


def discover_gpu_ids(worker_gpus: str | None,
                     environ: Mapping[str, str]) -> tuple[int | str, ...] | None:
    """TUNEDECK_WORKER_GPUS, else the worker's own CUDA_VISIBLE_DEVICES, else every GPU NVML
    counts; None when that leaves none (ranks then run on the CPU)."""
    for listed in (worker_gpus, environ.get("CUDA_VISIBLE_DEVICES")):
        if listed is not None:
            return tuple(visible_gpu_ids(listed) or ()) or None
    nvml = load_nvml()
    if nvml is None:
        return None
    try:
        return tuple(range(nvml.nvmlDeviceGetCount())) or None
    except Exception:  # NVMLError: a driver that answers nothing
        return None


class HostResources:
    """What a heartbeat says of the host: each GPU this worker hands out (model, memory
    used and total, utilisation), or, without GPUs, the CPUs and RAM the ranks share."""

    def __init__(self, identity: WorkerIdentity,
                 slurm_partition: Callable[[], dict[str, Any] | None] | None = None):
        """`slurm_partition`: a Slurm executor's partition as sinfo reads it now."""
        self._identity = identity
        self._slurm_partition = slurm_partition
        nvml = load_nvml() if identity.gpu_ids is not None else None
        self._sampler = JobSampler(host=identity.host, nvml=nvml,
                                   gpu_ids=list(identity.gpu_ids or ()))
        self._models = _gpu_models(nvml, identity.gpu_ids or ())

    def describe(self) -> dict[str, Any]:
        memory = psutil.virtual_memory()
        described: dict[str, Any] = {
            "cpu_count": os.cpu_count(),
            "memory_total_mb": memory.total / MIB,
            "memory_available_mb": memory.available / MIB,
            "gpus": None,
            "speed_packages": (None if self._identity.speed_packages is None
                               else sorted(self._identity.speed_packages)),
        }
        if self._slurm_partition is not None:
            described["slurm"] = self._slurm_partition()
        if self._identity.gpu_ids is not None:
            readings = [sample["values"] for sample in self._sampler.sample_gpus(time.time())]
            if len(readings) != len(self._identity.gpu_ids):
                readings = [{} for _ in self._identity.gpu_ids]  # NVML could not open them
            described["gpus"] = [
                {"index": position, "id": str(gpu_id), "model": model, **reading}
                for position, (gpu_id, model, reading)
                in enumerate(zip(self._identity.gpu_ids, self._models, readings))]
        return described


def installed_speed_packages() -> frozenset[str]:
    """The speed options' packages this worker's ranks can import."""
    return frozenset(package.import_name for package in SPEED_PACKAGES
                     if package_installed(package.import_name))


def _gpu_models(nvml: Any, gpu_ids: Sequence[int | str]) -> list[str | None]:
    models: list[str | None] = []
    for gpu_id in gpu_ids:
        try:
            handle = (nvml.nvmlDeviceGetHandleByIndex(gpu_id) if isinstance(gpu_id, int)
                      else nvml.nvmlDeviceGetHandleByUUID(gpu_id))
            name = nvml.nvmlDeviceGetName(handle)
            models.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:  # no NVML, or a GPU it cannot name
            models.append(None)
    return models
