"""A worker's own /metrics, served by its real HTTP server thread: its GPUs as the
heartbeat read them, the jobs it supervises and their tail lag, the points it stored."""
from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.servers import free_port
from tunedeck.settings import Settings
from tunedeck.units import MIB
from worker.monitoring.exporter import WorkerGauges, serve_worker_metrics, WORKER_GAUGES

GPUS = [{"index": 0, "id": "0", "model": "NVIDIA H100", "used_mb": 1024.0, "total_mb": 81559.0,
         "utilization_percent": 87, "power_w": 412.5, "temperature_c": 61},
        {"index": 1, "id": "1", "model": "NVIDIA H100", "used_mb": None, "total_mb": None,
         "utilization_percent": None, "power_w": None, "temperature_c": None}]


def samples_of(text: str) -> dict[tuple[str, tuple], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_gpu_readings_jobs_and_tail_lag():
    gauges = WorkerGauges()
    gauges.note_host("default@gpu-1", {"gpus": GPUS})
    with gauges.supervising(7):
        gauges.stored(7, [(1, {"kind": "step", "time": time.time() - 2.0}),
                          (2, {"kind": "step", "time": time.time() - 1.5})])
        gauges.pending(7, 3)
        with gauges.supervising(8):  # nothing stored yet: no lag series
            families = {family.name: family for family in gauges.collect()}
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in families.values() for sample in family.samples}
    gpu0 = (("gpu", "0"), ("model", "NVIDIA H100"), ("worker", "default@gpu-1"))
    assert samples[("tunedeck_worker_gpu_memory_used_bytes", gpu0)] == 1024.0 * MIB
    assert samples[("tunedeck_worker_gpu_utilization_ratio", gpu0)] == pytest.approx(0.87)
    assert samples[("tunedeck_worker_gpu_power_watts", gpu0)] == 412.5
    # NVML could not read GPU 1: no made-up zero.
    assert not [key for key in samples if ("gpu", "1") in key[1]]
    assert samples[("tunedeck_worker_jobs_running", (("worker", "default@gpu-1"),))] == 2
    lag = samples[("tunedeck_worker_job_tail_lag_seconds",
                   (("job_id", "7"), ("worker", "default@gpu-1")))]
    assert 1.5 <= lag < 10
    assert not [key for key in samples if key[0] == "tunedeck_worker_job_tail_lag_seconds"
                and ("job_id", "8") in key[1]]
    assert samples[("tunedeck_worker_job_pending_lines",
                    (("job_id", "7"), ("worker", "default@gpu-1")))] == 3
    # Done supervising: the jobs are gone from the gauges.
    after = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
             for family in gauges.collect() for sample in family.samples}
    assert after[("tunedeck_worker_jobs_running", (("worker", "default@gpu-1"),))] == 0
    assert not [key for key in after if key[0] == "tunedeck_worker_job_tail_lag_seconds"]


def test_served_on_the_port_setting_and_off_without_it(tmp_path):
    assert serve_worker_metrics(Settings(home=tmp_path)) is False
    port = free_port()
    settings = Settings(home=tmp_path, worker_metrics_port=port)
    before = WORKER_GAUGES.points_stored._value.get()
    with WORKER_GAUGES.supervising(99):
        WORKER_GAUGES.stored(99, [(1, {"time": time.time()})])
        assert serve_worker_metrics(settings) is True
        samples = samples_of(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
    assert samples[("tunedeck_worker_metric_points_stored_total", ())] == before + 1
    assert ("tunedeck_lost_workers_total", ()) in samples
    assert [key for key in samples if key[0] == "tunedeck_worker_job_tail_lag_seconds"
            and ("job_id", "99") in key[1]]
    # The port taken now: a second server is refused, logged, and nothing crashes.
    assert serve_worker_metrics(settings) is False
