"""About once a second while a job runs: every GPU the job holds (through NVML) and every
rank's process (through psutil), as rows for `tunedeck.metrics.samples.add_samples`.

NVML is imported lazily and only once a worker process: a host without the library or
without a driver simply has no GPU samples. Ranks are told apart by the RANK (or
LOCAL_RANK) that torchrun puts in their environment; a rank's own helpers (data loader
workers, compile workers) inherit it, so only the topmost process of each rank counts.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

import psutil

from trainer.startup.warm_rank import RANK_PROCESS_NAME_PREFIX
from tunedeck.metrics.samples import GPU, PROCESS
from tunedeck.units import MIB

log = logging.getLogger(__name__)
SAMPLE_SECONDS = 1.0
MILLIWATTS_PER_WATT = 1000
_NOT_LOADED = object()
_nvml_module: Any = _NOT_LOADED


def load_nvml() -> Any | None:
    """The initialised `pynvml` module, or None where there is no NVML (tried once)."""
    global _nvml_module
    if _nvml_module is _NOT_LOADED:
        try:
            import pynvml
            pynvml.nvmlInit()
            _nvml_module = pynvml
        except Exception as reason:  # ImportError, or NVMLError with no driver
            log.info("no GPU samples on this host: %s", reason)
            _nvml_module = None
    return _nvml_module


def visible_gpu_ids(cuda_visible_devices: str | None) -> list[int | str] | None:
    """The GPUs named by CUDA_VISIBLE_DEVICES (indices, or GPU-/MIG- UUIDs); None when
    it is unset, meaning every GPU."""
    if cuda_visible_devices is None:
        return None
    ids: list[int | str] = []
    for item in cuda_visible_devices.split(","):
        item = item.strip()
        if not item:
            continue
        if item.lstrip("-").isdigit():
            if int(item) < 0:  # CUDA stops at the first invalid index
                break
            ids.append(int(item))
        else:
            ids.append(item)
    return ids


class JobSampler:
    """Samples at most once every `interval_seconds`; `sample_if_due` costs nothing between."""

    def __init__(self, *, host: str, gpu_ids: list[int | str] | None, nvml: Any | None,
                 interval_seconds: float = SAMPLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.host = host
        self.nvml = nvml
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._last_sample: float | None = None
        self._gpus = self._open_gpus(gpu_ids) if nvml is not None else []
        self._processes: dict[int, psutil.Process] = {}  # kept: cpu_percent needs the last call
        self._rank_of: dict[int, int | None] = {}  # environments do not change: read once

    @classmethod
    def for_launch(cls, *, host: str, launch_env: dict[str, str]) -> "JobSampler":
        return cls(host=host, gpu_ids=visible_gpu_ids(launch_env.get("CUDA_VISIBLE_DEVICES")),
                   nvml=load_nvml())

    def sample_if_due(self, pids: Iterable[int]) -> list[dict[str, Any]]:
        now = self._clock()
        if self._last_sample is not None and now - self._last_sample < self.interval_seconds:
            return []
        self._last_sample = now
        wall_time = time.time()
        return [*self.sample_gpus(wall_time), *self.sample_processes(pids, wall_time)]

    def sample_gpus(self, wall_time: float) -> list[dict[str, Any]]:
        return [self._sample(GPU, index, self._gpu_values(handle), wall_time)
                for index, handle in self._gpus]

    def sample_processes(self, pids: Iterable[int], wall_time: float) -> list[dict[str, Any]]:
        samples = []
        for rank, process in sorted(self._rank_processes(pids).items()):
            try:
                with process.oneshot():
                    if process.status() == psutil.STATUS_ZOMBIE:
                        continue  # it has exited: its memory reads 0, which is no reading
                    rss = process.memory_info().rss
                    values = {"pid": process.pid, "rss_mb": rss / MIB,
                              "cpu_percent": process.cpu_percent(interval=None)}
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if rss == 0:  # exiting, its memory already freed, not yet a zombie: no reading
                continue
            samples.append(self._sample(PROCESS, rank, values, wall_time))
        return samples

    def ranks_seen(self) -> int:
        """How many ranks have had a process found so far."""
        return len(set(self._rank_of.values()))

    def _sample(self, source: str, index: int, values: dict, wall_time: float) -> dict[str, Any]:
        return {"time": wall_time, "host": self.host, "source": source, "index": index,
                "values": values}

    def _open_gpus(self, gpu_ids: list[int | str] | None) -> list[tuple[int, Any]]:
        nvml = self.nvml
        try:
            if gpu_ids is None:
                gpu_ids = list(range(nvml.nvmlDeviceGetCount()))
            gpus = []
            for position, gpu_id in enumerate(gpu_ids):
                if isinstance(gpu_id, int):
                    gpus.append((gpu_id, nvml.nvmlDeviceGetHandleByIndex(gpu_id)))
                else:  # a UUID: its position is the index the job's ranks see
                    gpus.append((position, nvml.nvmlDeviceGetHandleByUUID(gpu_id)))
            return gpus
        except Exception as reason:  # NVMLError: a GPU named that this host lacks
            log.warning("not sampling GPUs %s: %s", gpu_ids, reason)
            return []

    def _gpu_values(self, handle: Any) -> dict[str, float | None]:
        nvml = self.nvml
        memory = _or_none(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power_mw = _or_none(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        return {
            "used_mb": memory.used / MIB if memory is not None else None,
            "total_mb": memory.total / MIB if memory is not None else None,
            "utilization_percent": _or_none(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "power_w": power_mw / MILLIWATTS_PER_WATT if power_mw is not None else None,
            "temperature_c": _or_none(lambda: nvml.nvmlDeviceGetTemperature(
                handle, nvml.NVML_TEMPERATURE_GPU)),
        }

    def _rank_processes(self, pids: Iterable[int]) -> dict[int, psutil.Process]:
        """Each rank's topmost process among `pids`."""
        ranked: dict[int, tuple[int, psutil.Process]] = {}
        for pid in pids:
            process = self._process(pid)
            rank = self._rank(process) if process is not None else None
            if rank is not None:
                ranked[pid] = (rank, process)
        tops: dict[int, psutil.Process] = {}
        for rank, process in ranked.values():
            try:
                parent_rank = ranked.get(process.ppid(), (None, None))[0]
            except psutil.NoSuchProcess:
                continue
            if parent_rank != rank:  # not a helper the rank started
                tops[rank] = process
        return tops

    def _process(self, pid: int) -> psutil.Process | None:
        process = self._processes.get(pid)
        if process is None:
            try:
                process = self._processes[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                return None
        # A process that ended stays ended: its pid, if reused, is no longer the job's.
        return process if process.is_running() else None

    def _rank(self, process: psutil.Process) -> int | None:
        # Only a rank is remembered: a process forked by the warm launcher
        # becomes one (names itself) a moment after it appears.
        if process.pid not in self._rank_of:
            rank = rank_of_process(process)
            if rank is None:
                return None
            self._rank_of[process.pid] = rank
        return self._rank_of[process.pid]


def rank_of_process(process: psutil.Process) -> int | None:
    """The RANK torchrun gave the process: in its environment when torchrun started it, in
    its name when the warm launcher did (trainer/startup/warm_rank.py)."""
    try:
        environment = process.environ()
        name = process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    value = environment.get("RANK", environment.get("LOCAL_RANK"))
    if value is None and name.startswith(RANK_PROCESS_NAME_PREFIX):
        value = name.removeprefix(RANK_PROCESS_NAME_PREFIX)
    return int(value) if value is not None and value.isdigit() else None


def _or_none(read: Callable[[], Any]) -> Any:
    """One NVML reading, or None where the card does not support it."""
    try:
        return read()
    except Exception:  # NVMLError_NotSupported and kin
        return None
