"""Drives a job's trackers (spec.report_to) from its stored rows, on a thread of its own:
the ingest only nudges it after each commit, so a slow or down tracker never slows the
tail or fails the job. Each tracker has its own cursor (the last stored line of each rank,
the last sample of each host) in the run folder's trackers/<name>.json, so a tracker that
was away, or a worker that restarted, catches up from the stored rows. A tracker's error
becomes a job event; the tracker then waits longer before each try, and after
`FAILURES_BEFORE_DISABLED` failures in a row (or a missing package) it is left off."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import DBAPIError

from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import samples as sample_store, store as metric_store
from tunedeck.run_folder import RunFolder, read_json, write_json
from tunedeck.settings import Settings
from worker.trackers.tracker import ExportRows, MissingPackage, Tracker, scalars_of

log = logging.getLogger(__name__)

ROWS_PER_BATCH = 2000
EXPORT_SECONDS = 5.0  # a round at least this often, nudged or not
# And at most this often, however often the ingest nudges: each tracker call has a fixed
# cost (a W&B record, an MLflow file-store append per figure), so fewer, larger batches
# keep the trackers' share of the worker's CPU (and the GIL its tail shares) small.
MIN_ROUND_SECONDS = 2.0
FIRST_BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 300.0
FAILURES_BEFORE_DISABLED = 5
# After the job ends: how long the export may take to catch up and close its runs before
# the worker moves on (what is left stays in the database, and a later export resumes).
FINISH_SECONDS = 30.0


@dataclass
class _TrackerState:
    tracker: Tracker
    last_seq_by_rank: dict[int, int] = field(default_factory=dict)
    last_id_by_host: dict[str, int] = field(default_factory=dict)
    last_step: int = 0
    saved: dict[str, Any] = field(default_factory=dict)
    started: bool = False
    failures: int = 0
    retry_at: float = 0.0
    disabled: bool = False

    def cursor(self) -> dict[str, Any]:
        return {"points": {str(rank): seq for rank, seq in self.last_seq_by_rank.items()},
                "samples": dict(self.last_id_by_host), "last_step": self.last_step,
                "tracker": self.saved}

    def restore(self, cursor: dict[str, Any]) -> None:
        self.last_seq_by_rank = {int(rank): seq for rank, seq in cursor.get("points", {}).items()}
        self.last_id_by_host = dict(cursor.get("samples", {}))
        self.last_step = int(cursor.get("last_step", 0))
        self.saved = dict(cursor.get("tracker", {}))


def build_trackers(job_id: int, spec: JobSpec, run: RunFolder, settings: Settings) -> list[Tracker]:
    """The trackers the spec names (their libraries are imported only when they start)."""
    from worker.trackers.mlflow_run import MlflowTracker
    from worker.trackers.tensorboard_writer import TensorBoardTracker
    from worker.trackers.wandb_run import WandbTracker

    makers = {"tensorboard": lambda: TensorBoardTracker(run),
              "mlflow": lambda: MlflowTracker(job_id, run, settings),
              "wandb": lambda: WandbTracker(job_id, settings)}
    return [makers[name]() for name in spec.report_to]


class TrackerExport:
    """One job's export. `nudge()` after a commit; `finish(outcome)` once the job ended."""

    def __init__(self, job_id: int, spec: JobSpec, run: RunFolder, *, database: Database,
                 trackers: list[Tracker]):
        self._job_id, self._spec, self._run, self._database = job_id, spec, run, database
        self._states = [_TrackerState(tracker) for tracker in trackers]
        for state in self._states:
            cursor_file = run.tracker_cursor_file(state.tracker.name)
            try:
                if cursor_file.is_file():
                    state.restore(read_json(cursor_file))
            except (OSError, ValueError, TypeError, AttributeError) as error:
                # Unreadable: the tracker starts again from the first stored row.
                log.warning("job %s: %s unreadable (%s); exporting from the start",
                            job_id, cursor_file, error)
        self._wake, self._stop = threading.Event(), threading.Event()
        self._outcome: str | None = None
        self._cursor_unsaved = False
        self._thread = threading.Thread(target=self._loop, name=f"trackers-job-{job_id}",
                                        daemon=True)

    @classmethod
    def for_job(cls, job_id: int, spec: JobSpec, run: RunFolder, *, settings: Settings,
                database: Database) -> "TrackerExport":
        return cls(job_id, spec, run, database=database,
                   trackers=build_trackers(job_id, spec, run, settings))

    def start(self) -> "TrackerExport":
        if self._states:
            self._thread.start()
        return self

    def nudge(self) -> None:
        self._wake.set()

    def finish(self, outcome: str, *, timeout_seconds: float = FINISH_SECONDS) -> None:
        """Catch up with every stored row, close each run with the outcome; waits at most
        `timeout_seconds` (the thread goes on without the worker waiting for it)."""
        if not self._thread.is_alive():
            return
        self._outcome = str(outcome)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout_seconds)
        if self._thread.is_alive():
            log.warning("job %s: the trackers had not caught up after %.0f s", self._job_id,
                        timeout_seconds)

    def _loop(self) -> None:
        while True:
            stopping = self._stop.is_set()
            for state in self._states:
                self._export_to(state, final=stopping)
            if stopping:
                for state in self._states:
                    self._call(state, "finish", lambda state=state: state.tracker.finish(self._outcome))
                return
            round_started = time.monotonic()
            self._wake.wait(EXPORT_SECONDS)
            self._stop.wait(max(0.0, round_started + MIN_ROUND_SECONDS - time.monotonic()))
            self._wake.clear()

    def _export_to(self, state: _TrackerState, *, final: bool) -> None:
        if state.disabled or (time.monotonic() < state.retry_at and not final):
            return
        if not state.started:
            saved = self._call(state, "start", lambda: state.tracker.start(self._spec, state.saved))
            if saved is None:
                return
            state.saved, state.started = saved, True
            self._save_cursor(state)
        while not state.disabled:
            rows = self._read_rows(state)
            if rows is None or not (rows.points or rows.samples):
                return
            scalars, last_step = scalars_of(rows, last_step=state.last_step)
            if self._call(state, "write", lambda: state.tracker.write(scalars) or True) is None:
                return
            _advance(state, rows, last_step)
            self._save_cursor(state)
            if len(rows.points) < ROWS_PER_BATCH and len(rows.samples) < ROWS_PER_BATCH:
                return

    def _read_rows(self, state: _TrackerState) -> ExportRows | None:
        try:
            with self._database.transaction() as session:
                return ExportRows(
                    points=metric_store.read_points_after(
                        session=session, job_id=self._job_id,
                        last_seq_by_rank=state.last_seq_by_rank, limit=ROWS_PER_BATCH),
                    samples=sample_store.read_samples_after(
                        session=session, job_id=self._job_id,
                        last_id_by_host=state.last_id_by_host, limit=ROWS_PER_BATCH))
        except DBAPIError:
            return None  # the database is away: the rows wait in it for the next round

    def _call(self, state: _TrackerState, what: str, action):
        """The action's result; on an error, a job event, and the tracker backs off (or,
        its package missing or failing too often, is left off). Never raises."""
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - a tracker's failure is never the job's
            state.failures += 1
            state.disabled = (isinstance(error, MissingPackage)
                              or state.failures >= FAILURES_BEFORE_DISABLED)
            wait = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (state.failures - 1))
            state.retry_at = time.monotonic() + wait
            then = ("it is left off for this job" if state.disabled
                    else f"retrying from the stored rows in {wait:.0f} s")
            self._record_event(f"{state.tracker.name}: {what} failed: "
                               f"{type(error).__name__}: {error}; {then}")
            return None

    def _record_event(self, message: str) -> None:
        log.warning("job %s: %s", self._job_id, message)
        try:
            with self._database.transaction() as session:
                job_store.add_job_event(session=session, job_id=self._job_id, kind="tracker",
                                        message=message[:2000])
        except DBAPIError:
            pass  # logged above; the database being away is the supervision's to report

    def _save_cursor(self, state: _TrackerState) -> None:
        state.failures = 0 if state.started else state.failures
        try:
            write_json(self._run.tracker_cursor_file(state.tracker.name), state.cursor())
        except OSError as error:
            # The run folder's disk is full, say: the export goes on from the cursor in
            # memory; only a worker restart would export some rows again. Said once a job.
            if not self._cursor_unsaved:
                self._cursor_unsaved = True
                log.warning("job %s: could not save the trackers' cursor (%s); exporting on",
                            self._job_id, error)


def _advance(state: _TrackerState, rows: ExportRows, last_step: int) -> None:
    for _kind, rank, seq, *_rest in rows.points:
        state.last_seq_by_rank[rank] = max(seq, state.last_seq_by_rank.get(rank, -1))
    for sample_id, _time, host, *_rest in rows.samples:
        state.last_id_by_host[host] = max(sample_id, state.last_id_by_host.get(host, 0))
    state.last_step = last_step
