"""The job page's data request for a job with 100,000 steps (target: p95 under 300 ms).

A fresh database (SQLite, and PostgreSQL where reachable) holds two jobs written directly
with `metric_store.add_metric_points`, as the worker writes them: one with 100,000 step
points plus a memory point a step from each of 2 ranks, and, as the in-run reference, one
with 2,000 steps laid out the same way (the page's default `max_points`, so nothing is
downsampled there). `GET /api/jobs/{id}/metrics` (default max_points) is timed through
FastAPI's TestClient (the whole app, without the UI), alternating the two jobs after a
few untimed warm-up requests, as a page polls it. Printed: p95 and median of each, the ratio
big / reference, p95 / 300 ms target, the load average while timing (the ratio is the
figure a shared machine leaves meaningful), and each job's first request: the web keeps a
job's charted figures in memory between requests (tunedeck/metrics/chart_cache.py), so the first
one reads them all and the next ones only the rows added since.

PostgreSQL: TUNEDECK_TEST_POSTGRES_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test);
the bench makes its own database there and drops it after.

Usage: .venv/bin/python bench/page_data.py [--steps 100000] [--reference-steps 2000]
                                            [--requests 30] [--database sqlite|postgres|both]
Takes about a minute per database (most of it writing the points).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402
from ingest import postgres_database  # noqa: E402

from app.main import create_app  # noqa: E402
from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.metrics import store as metric_store
from tunedeck.db.migrate import upgrade_database  # noqa: E402
from tunedeck.settings import Settings  # noqa: E402

TARGET_SECONDS = 0.3
RANKS = 2
BATCH_STEPS = 2000
WARM_UP_REQUESTS = 3


def step_event(step: int, time_seconds: float) -> dict:
    return {"kind": "step", "rank": 0, "time": time_seconds, "step": step,
            "loss": 2.0 / (1 + step) ** 0.3, "learning_rate": 1e-4, "grad_norm": 1.0,
            "tokens_per_second": 5000.0 + step % 97, "step_seconds": 0.2, "tokens": 4096}


def memory_event(step: int, rank: int, time_seconds: float) -> dict:
    return {"kind": "memory", "rank": rank, "time": time_seconds, "step": step, "host": "bench",
            "device": f"cuda:{rank}", "allocated_mb": 1000.0 + step % 50, "reserved_mb": 1200.0,
            "peak_mb": 1100.0, "peak_reserved_mb": 1300.0, "rss_mb": 900.0}


def events_for_steps(first: int, last: int) -> list[tuple[int, dict]]:
    """Rank 0's lines alternate step and memory (seq counts a rank's lines); rank 1 has memory."""
    events = []
    for step in range(first, last):
        time_seconds = 1.7e9 + step * 0.2
        events.append((2 * step, step_event(step, time_seconds)))
        events.append((2 * step + 1, memory_event(step, 0, time_seconds)))
        events += [(step, memory_event(step, rank, time_seconds)) for rank in range(1, RANKS)]
    return events


def make_job(database: Database, steps: int) -> int:
    spec = JobSpec(name=f"page-data-{steps}", model="builtin:tiny-llama",
                   dataset="builtin:arithmetic", method="lora", num_gpus=RANKS, max_steps=steps)
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=spec).id
    for first in range(0, steps, BATCH_STEPS):
        with database.transaction() as session:
            metric_store.add_metric_points(session=session, job_id=job_id,
                                           events=events_for_steps(first, min(steps, first + BATCH_STEPS)))
    return job_id


def time_requests(client: TestClient, job_ids: list[int],
                  requests: int) -> tuple[dict[int, float], dict[int, list[float]]]:
    """The first request of each job (the web has no line of it cached yet), then the
    timed ones."""
    first, seconds = {}, {job_id: [] for job_id in job_ids}
    for job_id in job_ids:
        for warm_up in range(WARM_UP_REQUESTS):
            started = time.perf_counter()
            client.get(f"/api/jobs/{job_id}/metrics").raise_for_status()
            first.setdefault(job_id, time.perf_counter() - started)
    for _ in range(requests):
        for job_id in job_ids:  # alternating, so a slow moment of the machine hits both
            started = time.perf_counter()
            response = client.get(f"/api/jobs/{job_id}/metrics")
            seconds[job_id].append(time.perf_counter() - started)
            response.raise_for_status()
    return first, seconds


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def measure(url: str, home: Path, arguments) -> None:
    upgrade_database(url)
    database = Database(url)
    started = time.perf_counter()
    big, reference = make_job(database, arguments.steps), make_job(database, arguments.reference_steps)
    database.dispose()
    print(f"  wrote {arguments.steps:,} + {arguments.reference_steps:,} steps "
          f"({1 + RANKS} points a step) in {time.perf_counter() - started:.0f} s", flush=True)
    app = create_app(Settings(home=home, database_url=url), with_ui=False, with_sweeper=False)
    load_before = os.getloadavg()[0]
    with TestClient(app) as client:
        first, seconds = time_requests(client, [big, reference], arguments.requests)
    # The machine may be shared: the figures mean little without the load they ran under.
    print(f"  load average (1 min) while timing: {load_before:.2f} -> {os.getloadavg()[0]:.2f}")
    app.state.database.dispose()
    big_p95, reference_p95 = percentile(seconds[big], 0.95), percentile(seconds[reference], 0.95)
    print(f"  {arguments.steps:,} steps: p95 {big_p95 * 1000:.0f} ms, median "
          f"{statistics.median(seconds[big]) * 1000:.0f} ms ({arguments.requests} requests)")
    print(f"  {arguments.reference_steps:,} steps (reference): p95 {reference_p95 * 1000:.0f} ms, "
          f"median {statistics.median(seconds[reference]) * 1000:.0f} ms")
    print(f"  p95 ratio, {arguments.steps:,} / {arguments.reference_steps:,} steps: "
          f"{big_p95 / reference_p95:.2f}")
    print(f"  p95 / 300 ms target: {big_p95 / TARGET_SECONDS:.2f}  target < 1.00")
    print(f"  first request (nothing cached yet): {arguments.steps:,} steps "
          f"{first[big] * 1000:.0f} ms, {arguments.reference_steps:,} steps "
          f"{first[reference] * 1000:.0f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--reference-steps", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=30, help="timed requests a job")
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    arguments = parser.parse_args()
    kinds = ("sqlite", "postgres") if arguments.database == "both" else (arguments.database,)
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
            print(f"{kind}:", flush=True)
            if kind == "sqlite":
                measure(f"sqlite:///{Path(folder) / 'tunedeck.db'}", Path(folder), arguments)
                continue
            try:
                url, drop = postgres_database()
            except Exception as error:  # noqa: BLE001 (any failure to connect means: skip)
                print(f"  skipped: PostgreSQL not reachable ({type(error).__name__}: "
                      f"{str(error).splitlines()[0]})")
                continue
            try:
                measure(url, Path(folder), arguments)
            finally:
                drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
