"""Metric ingest under load: many jobs' ranks writing metric lines, the worker's tail and
store taking them into the database, SQLite and PostgreSQL.

`--jobs` jobs x `--ranks` ranks each append `--rate` step lines a second to their own
metrics/rank-K.jsonl for `--seconds` (one writer thread a job). For each job, an ingest loop
does what the worker's supervise loop does every poll: read the new whole lines
(worker.metrics_tail.MetricsTail) and store them and read the cancel flag in one transaction
(tunedeck.metrics.store, and tunedeck.jobs.queries.run_control as supervision reads it). It prints points written, points stored (lost
= written - stored, must be 0), points per second sustained, the ratio of the ingest rate to
the write rate (target 1.00: ingest keeps up) and the p95 lag from a line's write to its row.

With `--export`, each database's load runs twice, without and then with every job's
trackers on (TensorBoard, MLflow on a file store, W&B offline: worker/trackers/, nudged
after each commit as the worker's supervision does), and it prints the with/without ratio
of points stored per second, and how far behind the trackers were when the writers stopped.

With `--ceiling 1000,4000,16000,64000`, the offered rate steps up through those totals
(points/s over all jobs' ranks) until the store stops keeping up (at most 2 s of the
offered rate still unstored as the writers stop, and the p95 lag under 5 s): it prints each step's stored
rate and lag, the ceiling on each database, and whether any point was lost (points written =
points stored once the ingest has drained, at every rate).

Usage: .venv/bin/python bench/ingest.py [--jobs 20] [--ranks 8] [--rate 10] [--seconds 60]
       [--database sqlite|postgres|both] [--export] [--ceiling RATES]
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

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.metrics import store as metric_store  # noqa: E402
from tunedeck.metrics.events import encode_event  # noqa: E402
from tunedeck.db.migrate import upgrade_database  # noqa: E402
from tunedeck.spec.fields import TRACKERS  # noqa: E402
from tunedeck.run_folder import RunFolder, read_json  # noqa: E402
from tunedeck.settings import Settings  # noqa: E402
from worker.metrics_tail import MetricsTail  # noqa: E402
from worker.trackers.export import TrackerExport  # noqa: E402

POLL_SECONDS = 0.5  # the worker's default poll


WRITE_TICK_SECONDS = 0.1  # a writer appends what its ranks logged in the last tick at once


def write_lines(run: RunFolder, *, ranks: int, rate: float, seconds: float, written: list) -> None:
    """`rate` step lines a second for each of `ranks` ranks; at high rates a tick's lines of a
    rank go in one write, so the writers (threads of this process, where a real job's ranks
    are processes on other hosts) cost the ingest as little of the CPU as they can."""
    files = [run.rank_metrics_file(rank).open("a", encoding="utf-8") for rank in range(ranks)]
    started, step = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate) + 1
        now = time.time()
        for rank, file in enumerate(files):
            file.write("".join(
                encode_event("step", rank=rank, time=now, step=line_step, loss=1.0,
                             learning_rate=1e-4, grad_norm=1.0, tokens_per_second=1.0,
                             step_seconds=0.1, tokens=100)
                for line_step in range(step + 1, due + 1)))
            file.flush()
        written[0] += ranks * (due - step)
        step = due
        time.sleep(max(0.0, min(WRITE_TICK_SECONDS, started + (step + 1) / rate - time.monotonic())))
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
            job_queries.run_control(session=session, job_id=job_id, worker_name=None)
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
    offered_for = time.monotonic() - started
    stored_at_stop = _count_points(url, job_ids)  # what the ingest had kept up with
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
            "offered_for": offered_for, "stored_at_stop": stored_at_stop,
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
    parser.add_argument("--ceiling", default=None, metavar="RATES",
                        help="find the ingest ceiling: offer these total points/s in turn "
                             "(e.g. 1000,4000,16000,64000; spread over --jobs x --ranks) for "
                             "--seconds each, until the store stops keeping up")
    arguments = parser.parse_args()
    if arguments.ceiling:
        return find_ceilings(arguments)
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


# A step keeps up when, as the writers stop, what is written but not stored yet is at most
# KEEPS_UP_BACKLOG_SECONDS of the offered rate (a few of the ingest's 0.5 s polls) and the
# p95 lag from write to row stays under KEEPS_UP_LAG_SECONDS; the ceiling is the highest
# offered rate that did.
KEEPS_UP_BACKLOG_SECONDS = 2.0
KEEPS_UP_LAG_SECONDS = 5.0


def find_ceilings(arguments) -> int:
    rates = [float(rate) for rate in arguments.ceiling.split(",")]
    streams = arguments.jobs * arguments.ranks
    lost_anywhere = False
    for kind in (("sqlite", "postgres") if arguments.database == "both" else (arguments.database,)):
        ceiling = None
        print(f"{kind}: {arguments.jobs} jobs x {arguments.ranks} ranks, {arguments.seconds:g} s "
              "a step", flush=True)
        for offered in rates:
            step_arguments = argparse.Namespace(**{**vars(arguments), "rate": offered / streams})
            result = _one_load(kind, step_arguments, export=False)
            during = result["stored_at_stop"] / result["offered_for"]
            written_rate = result["written"] / result["offered_for"]
            backlog = (result["written"] - result["stored_at_stop"]) / max(1.0, written_rate)
            lost = result["written"] - result["stored"]
            lost_anywhere |= lost != 0
            keeps_up = backlog <= KEEPS_UP_BACKLOG_SECONDS and \
                result["lag_p95"] <= KEEPS_UP_LAG_SECONDS
            print(f"  offered {offered:>8,.0f}/s (written {written_rate:>8,.0f}/s): stored "
                  f"{during:>8,.0f}/s while offered, {backlog:5.1f} s behind as the writers "
                  f"stopped; lag p95 {result['lag_p95']:6.2f} s, median "
                  f"{result['lag_median']:5.2f} s; lost once drained {lost:,}; "
                  f"{'keeps up' if keeps_up else 'falls behind'}", flush=True)
            if not keeps_up:
                break
            ceiling = offered
        print(f"{kind}: ceiling {ceiling:,.0f} points/s" if ceiling else
              f"{kind}: below {rates[0]:,.0f} points/s", flush=True)
    print("nothing lost at any rate" if not lost_anywhere else "POINTS LOST", flush=True)
    return 1 if lost_anywhere else 0


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
