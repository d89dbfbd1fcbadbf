"""Prometheus against a real `tunedeck up` (web, Celery worker, torchrun on 2 CPU ranks):
the web's and the worker's /metrics scraped while a builtin:tiny-llama job runs."""
from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.servers import free_port, running_tunedeck, wait_for_steps, wait_until

pytestmark = [pytest.mark.torchrun]

LONG_JOB = {"name": "prometheus", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
            "method": "lora", "backend": "fsdp", "num_gpus": 2, "max_steps": 100_000,
            "micro_batch_size": 1, "seq_len": 64}


def scrape(url: str, **kwargs) -> dict[tuple[str, tuple], float]:
    response = httpx.get(url, timeout=30, **kwargs)
    assert response.status_code == 200, response.text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples}


def series(samples, name: str, **labels) -> list[float]:
    return [value for (sample, have), value in samples.items()
            if sample == name and set(labels.items()) <= set(have)]


def test_web_and_worker_metrics_while_a_job_runs(tmp_path):
    worker_port = free_port()
    env = {"TUNEDECK_WORKER_METRICS_PORT": str(worker_port)}
    with running_tunedeck(tmp_path / "up", extra_env=env) as server:
        job_id = server.submit(LONG_JOB)
        try:
            wait_for_steps(server, job_id, 3)
            assert server.job(job_id)["status"] == "running"
            web_url, worker_url = f"{server.base_url}/metrics", f"http://127.0.0.1:{worker_port}/metrics"
            web = scrape(web_url)
            assert series(web, "tunedeck_jobs", status="running", queue="default") == [1]
            assert series(web, "tunedeck_workers", state="online") == [1]
            assert series(web, "tunedeck_job_queue_wait_seconds_gcount") == [1]
            [lag] = series(web, "tunedeck_job_ingest_lag_seconds", job_id=str(job_id))
            assert 0 <= lag < 30
            [stored] = series(web, "tunedeck_metric_points_stored_total")
            assert stored >= 3
            assert series(web, "tunedeck_http_request_duration_seconds_count",
                          route="/api/jobs/{job_id}/metrics", status="200")[0] >= 1
            assert sum(series(web, "tunedeck_chart_cache_reads_total")) >= 1

            worker = wait_until(lambda: _with_tail_lag(worker_url, job_id), 30,
                                "the worker's tail lag of the job")
            assert series(worker, "tunedeck_worker_jobs_running") == [1]
            [tail_lag] = series(worker, "tunedeck_worker_job_tail_lag_seconds", job_id=str(job_id))
            assert 0 <= tail_lag < 30
            assert series(worker, "tunedeck_worker_job_pending_lines", job_id=str(job_id)) == [0]
            [worker_stored] = series(worker, "tunedeck_worker_metric_points_stored_total")
            assert worker_stored >= 3
            # Rising while the job runs: the counters Prometheus rate()s.
            time.sleep(2.0)
            again = scrape(worker_url)
            assert series(again, "tunedeck_worker_metric_points_stored_total")[0] > worker_stored
            assert series(scrape(web_url), "tunedeck_metric_points_stored_total")[0] > stored
        finally:
            server.http.post(f"/api/jobs/{job_id}/cancel")
            server.wait_for(job_id, {"cancelled", "failed", "succeeded"}, timeout_seconds=120)
        after = scrape(f"{server.base_url}/metrics")
        assert series(after, "tunedeck_jobs", status="cancelled", queue="default") == [1]
        assert series(after, "tunedeck_job_duration_seconds_gcount", outcome="cancelled") == [1]
        assert not series(after, "tunedeck_job_ingest_lag_seconds")
        assert series(scrape(f"http://127.0.0.1:{worker_port}/metrics"),
                      "tunedeck_worker_jobs_running") == [0]


def _with_tail_lag(url: str, job_id: int):
    samples = scrape(url)
    return samples if series(samples, "tunedeck_worker_job_tail_lag_seconds",
                             job_id=str(job_id)) else None
