"""Metric ingest under load: many jobs' ranks writing metric lines, the worker's tail and
store taking them into the database, SQLite and PostgreSQL.

`--jobs` jobs x `--ranks` ranks each append `--rate` step lines a second to their own
metrics/rank-K.jsonl for `--seconds` (one writer thread a job). For each job, an ingest loop
does what the worker's supervise loop does every poll: read the new whole lines
(worker.metrics_tail.MetricsTail) and store them and read the cancel flag in one transaction
(tunedeck.metrics.store, tunedeck.job_store). It prints points written, points stored (lost
= written - stored, must be 0), points per second sustained, the ratio of the ingest rate to
the write rate (target 1.00: ingest keeps up) and the p95 lag from a line's write to its row.

With `--export`, each database's load runs twice, without and then with every job's
trackers on (TensorBoard, MLflow on a file store, W&B offline: worker/trackers/, nudged
after each commit as the worker's supervision does), and it prints the with/without ratio
of points stored per second, and how far behind the trackers were when the writers stopped.

Usage: .venv/bin/python bench/ingest.py [--jobs 20] [--ranks 8] [--rate 10] [--seconds 60]
       [--database sqlite|postgres|both] [--export]
PostgreSQL: TUNEDECK_TEST_POSTGRES_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test);
the bench makes and drops a database of its own.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunedeck import job_store  # noqa: E402
from tunedeck.db.engine import Database  # noqa: E402
from tunedeck.job_spec import JobSpec  # noqa: E402
from tunedeck.metrics import store as metric_store  # noqa: E402
from tunedeck.metrics.events import encode_event  # noqa: E402
from tunedeck.migrate import upgrade_database  # noqa: E402
from tunedeck.job_spec import TRACKERS  # noqa: E402
from tunedeck.run_folder import RunFolder, read_json  # noqa: E402
from tunedeck.settings import Settings  # noqa: E402
from worker.metrics_tail import MetricsTail  # noqa: E402
from worker.trackers.export import TrackerExport  # noqa: E402

POLL_SECONDS = 0.5  # the worker's default poll


def write_lines(run: RunFolder, *, ranks: int, rate: float, seconds: float, written: list) -> None:
    files = [run.rank_metrics_file(rank).open("a", encoding="utf-8") for rank in range(ranks)]
    started, step = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        step += 1
        for rank, file in enumerate(files):
            file.write(encode_event("step", rank=rank, time=time.time(), step=step, loss=1.0,
                                    learning_rate=1e-4, grad_norm=1.0, tokens_per_second=1.0,
                                    step_seconds=0.1, tokens=100))
            file.flush()
        written[0] += ranks
        time.sleep(max(0.0, started + step / rate - time.monotonic()))
    for file in files:
        file.close()


def ingest(database: Database, job_id: int, run: RunFolder, *, stop: threading.Event,
           lags: list[float], on_stored=lambda: None) -> None:
    tail = MetricsTail(run)
    while True:
        finished = stop.is_set()
        events = tail.read_new_events()
        now = time.time()
        with database.transaction() as session:
            if events:
                metric_store.add_metric_points(session=session, job_id=job_id, events=events)
            job_store.is_cancel_requested(session=session, job_id=job_id)
        if events:
            on_stored()
        lags.extend(now - event["time"] for _seq, event in events)
        if finished:
            return
        time.sleep(POLL_SECONDS)


def run_load(url: str, folder: Path, arguments, *, export: bool = False) -> dict:
    upgrade_database(url)
    database = Database(url)
    spec = JobSpec(max_steps=1, report_to=list(TRACKERS) if export else [])
    with database.transaction() as session:
        job_ids = [job_store.create_job(session=session, spec=spec).id
                   for _ in range(arguments.jobs)]
    runs = [RunFolder(folder / f"job-{job_id}") for job_id in job_ids]
    for run in runs:
        run.metrics_dir.mkdir(parents=True)
    settings = Settings(home=folder, mlflow_tracking_uri=(folder / "mlruns").as_uri(),
                        wandb_mode="offline", wandb_dir=folder / "wandb")
    exports = [TrackerExport.for_job(job_id, spec, run, settings=settings,
                                     database=database).start()
               for job_id, run in zip(job_ids, runs)]
    written, lags, stop = [[0] for _ in job_ids], [[] for _ in job_ids], threading.Event()
    writers = [threading.Thread(target=write_lines, args=(run,), kwargs=dict(
        ranks=arguments.ranks, rate=arguments.rate, seconds=arguments.seconds, written=count))
        for run, count in zip(runs, written)]
    ingesters = [threading.Thread(target=ingest, args=(database, job_id, run),
                                  kwargs=dict(stop=stop, lags=lag, on_stored=export.nudge))
                 for job_id, run, lag, export in zip(job_ids, runs, lags, exports)]
    started = time.monotonic()
    for thread in writers + ingesters:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in ingesters:
        thread.join()
    elapsed = time.monotonic() - started
    behind = _tracker_lag(runs, job_ids, url) if export else 0
    for export_of_job in exports:
        export_of_job.finish("succeeded")
    database.dispose()
    all_lags = sorted(lag for lag_list in lags for lag in lag_list)
    return {"written": sum(count[0] for count in written), "elapsed": elapsed,
            "lag_p95": all_lags[int(0.95 * (len(all_lags) - 1))] if all_lags else float("nan"),
            "lag_median": statistics.median(all_lags) if all_lags else float("nan"),
            "stored": _count_points(url, job_ids), "tracker_rows_behind": behind}


def _tracker_lag(runs: list[RunFolder], job_ids: list[int], url: str) -> int:
    """Rows stored but not yet in a tracker, summed over jobs and trackers, as the ingest
    ends (from each tracker's cursor)."""
    behind = 0
    stored_per_job = _count_points(url, job_ids) / max(1, len(job_ids))
    for run in runs:
        for name in TRACKERS:
            cursor_file = run.tracker_cursor_file(name)
            points = read_json(cursor_file).get("points", {}) if cursor_file.is_file() else {}
            behind += max(0, stored_per_job - sum(seq + 1 for seq in points.values()))
    return int(behind)


def _count_points(url: str, job_ids: list[int]) -> int:
    from sqlalchemy import func, select

    from tunedeck.db.models import MetricPoint

    database = Database(url)
    with database.transaction() as session:
        count = session.scalar(select(func.count()).select_from(MetricPoint)
                               .where(MetricPoint.job_id.in_(job_ids)))
    database.dispose()
    return int(count)


def postgres_database() -> tuple[str, callable]:
    from sqlalchemy import create_engine, text

    admin_url = os.environ.get("TUNEDECK_TEST_POSTGRES_URL",
                               "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    name = f"tunedeck_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return admin_url.rsplit("/", 1)[0] + f"/{name}", drop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rate", type=float, default=10.0, help="lines a second per rank")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--export", action="store_true",
                        help="also run with every tracker on, and print the with/without ratio")
    arguments = parser.parse_args()
    target = arguments.jobs * arguments.ranks * arguments.rate
    for kind in (("sqlite", "postgres") if arguments.database == "both" else (arguments.database,)):
        rates = {}
        for export in ((False, True) if arguments.export else (False,)):
            result = _one_load(kind, arguments, export=export)
            rates[export] = _report(kind, arguments, result, target, export=export)
        if arguments.export:
            print(f"{kind}: export on/off ingest rate ratio {rates[True] / rates[False]:.3f} "
                  f"({rates[True]:,.0f} vs {rates[False]:,.0f} points/s stored)", flush=True)
    return 0


def _one_load(kind: str, arguments, *, export: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="tunedeck-ingest-") as directory:
        folder = Path(directory)
        drop = None
        url = f"sqlite:///{folder / 'bench.db'}"
        if kind == "postgres":
            url, drop = postgres_database()
        try:
            return run_load(url, folder, arguments, export=export)
        finally:
            if drop:
                drop()


def _report(kind: str, arguments, result: dict, target: float, *, export: bool) -> float:
    rate = result["stored"] / result["elapsed"]
    trackers = (f"; trackers on ({', '.join(TRACKERS)}), rows behind as the writers stopped "
                f"{result['tracker_rows_behind']:,}" if export else "; trackers off")
    print(f"{kind}: {arguments.jobs} jobs x {arguments.ranks} ranks x {arguments.rate:g} "
          f"points/s for {arguments.seconds:g} s: written {result['written']:,}, stored "
          f"{result['stored']:,}, lost {result['written'] - result['stored']:,} "
          f"(stored/written {result['stored'] / max(1, result['written']):.4f}); "
          f"{rate:,.0f} points/s sustained against {target:,.0f}/s offered; lag from write "
          f"to row p95 {result['lag_p95']:.2f} s, median {result['lag_median']:.2f} s"
          f"{trackers}", flush=True)
    return rate


if __name__ == "__main__":
    sys.exit(main())
