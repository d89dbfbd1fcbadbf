"""GET /metrics (Prometheus text format) over a database holding jobs, workers and points:
each series is there with the value the rows make."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from app.main import create_app
from tunedeck.jobs import store as job_store
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.models import Job, Worker, utc_now
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics.store import add_metric_points
from tunedeck.db.migrate import upgrade_database
from tunedeck.settings import Settings


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples}


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def client(request, tmp_path):
    """The API over SQLite or PostgreSQL: the queue is read out of the spec's JSON, and the
    two hand back datetimes differently (naive on SQLite)."""
    database_url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    settings = Settings(home=tmp_path, database_url=database_url, broker_url=None)
    if database_url is None:
        upgrade_database(settings.resolved_database_url)
    app = create_app(settings, with_ui=False, with_sweeper=False)
    with TestClient(app) as client:
        client.app_state = app.state
        yield client
    app.state.database.dispose()


@pytest.fixture
def cluster(client):
    """Two workers (one lost), a running job with points, a queued one on queue "big",
    a succeeded one that ran 40 s after waiting 20 s, and a failed one that never started."""
    database = client.app_state.database
    now = utc_now()
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="default@gpu-1", host="gpu-1", queues=["default"], pid=1,
            concurrency=1, resources={}, started_at=now)
        worker_registry.record_heartbeat(
            session=session, name="big@gpu-2", host="gpu-2", queues=["big"], pid=2,
            concurrency=1, resources={}, started_at=now)
        session.execute(update(Worker).where(Worker.name == "big@gpu-2").values(state="lost"))
        running = job_store.create_job(session=session, spec=JobSpec(max_steps=5)).id
        job_store.mark_job_running(session=session, job_id=running, run_dir="/r",
                                   worker_host="gpu-1", worker_name="default@gpu-1")
        stamp = time.time() - 3.0
        add_metric_points(session=session, job_id=running, events=[
            (seq, {"kind": "step", "rank": 0, "step": seq, "time": stamp - 10 + seq,
                   "loss": 1.0}) for seq in range(1, 11)])
        job_store.create_job(session=session, spec=JobSpec(max_steps=5, queue="big"))
        done = job_store.create_job(session=session, spec=JobSpec(max_steps=5)).id
        job_store.mark_job_running(session=session, job_id=done, run_dir="/d",
                                   worker_host="gpu-1", worker_name="default@gpu-1")
        job_store.mark_job_succeeded(session=session, job_id=done)
        session.execute(update(Job).where(Job.id == done).values(
            created_at=now - timedelta(seconds=60), started_at=now - timedelta(seconds=40),
            finished_at=now))
        never_started = job_store.create_job(session=session, spec=JobSpec(max_steps=5)).id
        job_store.mark_job_failed(session=session, job_id=never_started, error="bad input")
    return {"running": running, "stamp": stamp}


def test_jobs_by_status_and_queue_and_workers_by_state(client, cluster):
    samples = scrape(client)
    assert value(samples, "tunedeck_database_scrape_ok") == 1
    assert value(samples, "tunedeck_jobs", status="running", queue="default") == 1
    assert value(samples, "tunedeck_jobs", status="queued", queue="big") == 1
    assert value(samples, "tunedeck_jobs", status="queued", queue="default") == 0
    assert value(samples, "tunedeck_jobs", status="succeeded", queue="default") == 1
    assert value(samples, "tunedeck_jobs", status="failed", queue="default") == 1
    assert value(samples, "tunedeck_workers", state="online") == 1
    assert value(samples, "tunedeck_workers", state="lost") == 1
    assert value(samples, "tunedeck_workers", state="stopped") == 0


def test_queue_wait_and_duration_histograms_count_the_window(client, cluster):
    samples = scrape(client)
    # Started in the window: the running job (waited ~0 s) and the succeeded one (20 s).
    assert value(samples, "tunedeck_job_queue_wait_seconds_gcount") == 2
    assert value(samples, "tunedeck_job_queue_wait_seconds_bucket", le="1.0") == 1
    assert value(samples, "tunedeck_job_queue_wait_seconds_bucket", le="15.0") == 1
    assert value(samples, "tunedeck_job_queue_wait_seconds_bucket", le="30.0") == 2
    assert 20 <= value(samples, "tunedeck_job_queue_wait_seconds_gsum") < 22
    assert value(samples, "tunedeck_job_duration_seconds_gcount", outcome="succeeded") == 1
    assert value(samples, "tunedeck_job_duration_seconds_gsum", outcome="succeeded") == \
        pytest.approx(40, abs=0.01)
    assert value(samples, "tunedeck_job_duration_seconds_bucket", outcome="succeeded",
                 le="30.0") == 0
    assert value(samples, "tunedeck_job_duration_seconds_bucket", outcome="succeeded",
                 le="60.0") == 1
    # The failed job never started: it has no duration.
    assert value(samples, "tunedeck_job_duration_seconds_gcount", outcome="failed") == 0


def test_ingest_lag_per_running_job_and_points_stored(client, cluster):
    samples = scrape(client)
    lag = value(samples, "tunedeck_job_ingest_lag_seconds", job_id=str(cluster["running"]))
    assert 3.0 <= lag < 3.0 + 10  # the newest point was stamped 3 s before the scrape
    assert value(samples, "tunedeck_metric_points_stored_total") == 10
    assert not [key for key in samples if key[0] == "tunedeck_job_ingest_lag_seconds"
                and key[1] != (("job_id", str(cluster["running"])),)]


def test_request_latency_by_route_template_and_chart_cache_reads(client, cluster):
    job_id = cluster["running"]
    before = scrape(client)
    for _ in range(3):
        assert client.get(f"/api/jobs/{job_id}/metrics").status_code == 200
    assert client.get("/api/jobs/999999/metrics").status_code == 404
    samples = scrape(client)
    route = "/api/jobs/{job_id}/metrics"
    assert value(samples, "tunedeck_http_request_duration_seconds_count", route=route,
                 method="GET", status="200") == 3
    assert value(samples, "tunedeck_http_request_duration_seconds_count", route=route,
                 method="GET", status="404") == 1
    assert value(samples, "tunedeck_http_request_duration_seconds_sum", route=route,
                 method="GET", status="200") > 0
    assert not [key for key in samples if str(job_id) in dict(key[1]).get("route", "")]
    client.request("BREW", "/api/jobs")
    methods = {dict(key[1])["method"] for key in scrape(client)
               if key[0] == "tunedeck_http_request_duration_seconds_count"}
    assert "other" in methods and methods <= {"GET", "POST", "other"}
    # The chart cache is per process, shared by the apps of this test run: compare.
    reads = {result: value(samples, "tunedeck_chart_cache_reads_total", result=result)
             - value(before, "tunedeck_chart_cache_reads_total", result=result)
             for result in ("hit", "miss", "reload")}
    assert reads["miss"] >= 1 and reads["hit"] >= 2 and reads["reload"] == 0


def test_an_unreachable_database_is_a_zero_not_a_failed_scrape(client, cluster):
    """From loopback the scrape needs no credentials, so it answers even with the database
    gone: Prometheus then sees the outage instead of a failed target."""
    if client.app_state.settings.database_url is not None:
        pytest.skip("takes the SQLite file away")
    (client.app_state.settings.home_dir / "tunedeck.db").unlink()
    client.app_state.database.engine.dispose()
    with TestClient(client.app, client=("127.0.0.1", 40000)) as loopback:
        response = loopback.get("/metrics")
    assert response.status_code == 200
    assert "tunedeck_database_scrape_ok 0.0" in response.text
    assert "tunedeck_jobs{" not in response.text
