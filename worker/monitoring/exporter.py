"""The worker's /metrics: one process-wide WorkerGauges, fed by the heartbeat (its NVML
readings, so a scrape makes no NVML call of its own) and by each job's supervision loop
(every poll that stored lines), served by prometheus_client's own HTTP server thread.

Tail lag of a job: now minus the rank stamp of the newest line this worker stored for it.
It grows when the ranks stop writing (a long evaluation) and when the database does not
answer (the lines wait in memory: `tunedeck_worker_job_pending_lines`).
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tunedeck.cluster.sweep import LOST_WORKERS_COLLECTOR
from tunedeck.settings import Settings
from tunedeck.units import MIB

log = logging.getLogger(__name__)


@dataclass
class _JobTail:
    newest_stamp: float | None = None
    pending_lines: int = 0


class WorkerGauges(Collector):
    """What this worker process knows now; safe across its task threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._worker = ""
        self._gpus: list[dict[str, Any]] | None = None
        self._jobs: dict[int, _JobTail] = {}
        self.points_stored = Counter(
            "tunedeck_worker_metric_points_stored",
            "metric lines this worker stored (a retried batch counts once); rate() of it is "
            "points per second", registry=None)

    def describe(self) -> list[Metric]:
        return []

    def note_host(self, worker_name: str, described: dict[str, Any]) -> None:
        """A heartbeat's description of the host (worker_identity.HostResources.describe)."""
        with self._lock:
            self._worker = worker_name
            self._gpus = described.get("gpus")

    @contextmanager
    def supervising(self, job_id: int) -> Iterator[None]:
        with self._lock:
            self._jobs[job_id] = _JobTail()
        try:
            yield
        finally:
            with self._lock:
                self._jobs.pop(job_id, None)

    def stored(self, job_id: int, events: Sequence[tuple[int, dict]]) -> None:
        stamps = [event["time"] for _seq, event in events
                  if isinstance(event.get("time"), (int, float))]
        with self._lock:
            tail = self._jobs.get(job_id)
            if tail is not None:
                tail.pending_lines = 0
                if stamps:
                    tail.newest_stamp = max(stamps + [tail.newest_stamp or 0.0])
        self.points_stored.inc(len(events))

    def pending(self, job_id: int, lines: int) -> None:
        with self._lock:
            tail = self._jobs.get(job_id)
            if tail is not None:
                tail.pending_lines = lines

    def collect(self) -> Iterable[Metric]:
        now = time.time()
        with self._lock:
            worker, gpus = self._worker, list(self._gpus or [])
            jobs = {job_id: _JobTail(tail.newest_stamp, tail.pending_lines)
                    for job_id, tail in self._jobs.items()}
        running = GaugeMetricFamily("tunedeck_worker_jobs_running",
                                    "jobs (nodes of jobs) this worker supervises now",
                                    labels=["worker"])
        running.add_metric([worker], len(jobs))
        lag = GaugeMetricFamily(
            "tunedeck_worker_job_tail_lag_seconds",
            "per job: now minus the rank stamp of the newest metric line this worker stored",
            labels=["worker", "job_id"])
        pending = GaugeMetricFamily(
            "tunedeck_worker_job_pending_lines",
            "per job: metric lines read but not stored yet (the database did not answer)",
            labels=["worker", "job_id"])
        for job_id, tail in sorted(jobs.items()):
            if tail.newest_stamp is not None:
                lag.add_metric([worker, str(job_id)], max(0.0, now - tail.newest_stamp))
            pending.add_metric([worker, str(job_id)], tail.pending_lines)
        yield from (running, lag, pending, *_gpu_families(worker, gpus))


# (series, help, the reading's key, its factor to the series' unit)
GPU_SERIES = (
    ("tunedeck_worker_gpu_memory_used_bytes", "GPU memory in use (NVML)", "used_mb", MIB),
    ("tunedeck_worker_gpu_memory_total_bytes", "GPU memory in all (NVML)", "total_mb", MIB),
    ("tunedeck_worker_gpu_utilization_ratio", "share of the last sample period a kernel ran "
     "(NVML utilisation, 0-1)", "utilization_percent", 0.01),
    ("tunedeck_worker_gpu_power_watts", "GPU power draw (NVML)", "power_w", 1.0),
    ("tunedeck_worker_gpu_temperature_celsius", "GPU temperature (NVML)", "temperature_c", 1.0),
)


def _gpu_families(worker: str, gpus: list[dict[str, Any]]) -> list[Metric]:
    families = []
    for name, documentation, key, factor in GPU_SERIES:
        family = GaugeMetricFamily(name, documentation + ", as the last heartbeat read it",
                                   labels=["worker", "gpu", "model"])
        for gpu in gpus:
            reading = gpu.get(key)
            if isinstance(reading, (int, float)):  # None: NVML could not read it
                family.add_metric([worker, str(gpu.get("id")), str(gpu.get("model") or "")],
                                  reading * factor)
        families.append(family)
    return families


WORKER_GAUGES = WorkerGauges()


def worker_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WORKER_GAUGES)
    registry.register(WORKER_GAUGES.points_stored)
    registry.register(LOST_WORKERS_COLLECTOR)
    return registry


def serve_worker_metrics(settings: Settings) -> bool:
    """Serve /metrics on TUNEDECK_WORKER_METRICS_PORT (a daemon thread); False when unset
    or the port cannot be had (logged: the worker runs its jobs all the same)."""
    if settings.worker_metrics_port is None:
        return False
    try:
        start_http_server(settings.worker_metrics_port, addr=settings.worker_metrics_host,
                          registry=worker_registry())
    except OSError as error:
        log.error("cannot serve the worker's /metrics on %s:%s (TUNEDECK_WORKER_METRICS_PORT): "
                  "%s", settings.worker_metrics_host, settings.worker_metrics_port, error)
        return False
    log.info("worker /metrics on http://%s:%s/metrics", settings.worker_metrics_host,
             settings.worker_metrics_port)
    return True
