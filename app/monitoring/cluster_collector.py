"""The cluster's series, read from the database at each scrape.

The web holds no job state and sees no job change, so nothing here is counted as it
happens: each scrape runs a few aggregate queries. The two histograms are therefore
GaugeHistograms over a trailing window (WINDOW_SECONDS): the queue waits of the jobs that
started in it and the durations of the jobs that finished in it. They are what the last hour
looked like, not counters to rate(): a histogram_quantile() over them needs no rate().
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Iterable, Sequence

from prometheus_client.core import (CounterMetricFamily, GaugeHistogramMetricFamily,
                                    GaugeMetricFamily, Metric)
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from tunedeck.db.engine import Database
from tunedeck.db.models import Job, MetricPoint, Worker
from tunedeck.jobs.states import FINISHED_STATUSES, RUNNING, STATUSES
from tunedeck.metrics.events import KINDS

log = logging.getLogger(__name__)

WINDOW_SECONDS = 3600.0
DEFAULT_QUEUE = "default"  # a spec with no queue (and no host) runs on the default queue
WORKER_STATES = ("online", "stopped", "lost")
# Seconds: from a job picked up at once to one that waited half a day for GPUs.
QUEUE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600)
# From a job that fails in its first seconds to a day-long fine-tune.
DURATION_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600)


class ClusterCollector(Collector):
    def __init__(self, database: Database, *, window_seconds: float = WINDOW_SECONDS):
        self.database = database
        self.window_seconds = window_seconds

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time: do not run the queries at registration

    def collect(self) -> Iterable[Metric]:
        scrape_ok = GaugeMetricFamily(
            "tunedeck_database_scrape_ok",
            "1 when this scrape could read the database (the series below are then current)")
        try:
            families = self._read()
        except Exception:  # the database is down: say so, never fail the whole scrape
            log.exception("could not read the cluster's state for /metrics")
            scrape_ok.add_metric([], 0)
            yield scrape_ok
            return
        scrape_ok.add_metric([], 1)
        yield scrape_ok
        yield from families

    def _read(self) -> list[Metric]:
        now = datetime.now(timezone.utc)
        since = now - timedelta(seconds=self.window_seconds)
        queue = func.coalesce(Job.spec["queue"].as_string(), DEFAULT_QUEUE)
        with self.database.transaction() as session:
            job_counts = session.execute(
                select(Job.status, queue, func.count()).group_by(Job.status, queue)).all()
            worker_counts = dict(session.execute(
                select(Worker.state, func.count()).group_by(Worker.state)).all())
            started = session.execute(
                select(Job.created_at, Job.started_at)
                .where(Job.started_at.is_not(None), Job.started_at >= since)).all()
            finished = session.execute(
                select(Job.status, Job.started_at, Job.finished_at)
                .where(Job.status.in_(FINISHED_STATUSES), Job.finished_at.is_not(None),
                       Job.finished_at >= since)).all()
            newest_by_kind = session.execute(
                select(Job.id, *_newest_stamp_of_each_kind()).where(Job.status == RUNNING)).all()
            running_ids = [job_id for job_id, *_stamps in newest_by_kind]
            newest = {job_id: max(found) for job_id, *stamps in newest_by_kind
                      if (found := [stamp for stamp in stamps if stamp is not None])}
            highest_point_id = session.scalar(select(func.max(MetricPoint.id))) or 0
        return [_jobs(job_counts), _workers(worker_counts),
                _histogram("tunedeck_job_queue_wait_seconds",
                           f"from submit to start, of the jobs that started in the last "
                           f"{self.window_seconds:g} s", QUEUE_WAIT_BUCKETS,
                           {(): [_seconds(started_at, created_at)
                                 for created_at, started_at in started]}),
                _histogram("tunedeck_job_duration_seconds",
                           f"from start to end, by outcome, of the jobs that finished in the "
                           f"last {self.window_seconds:g} s", DURATION_BUCKETS,
                           _durations(finished), label_names=["outcome"]),
                _ingest_lag(running_ids, newest, time.time()),
                _points_stored(highest_point_id)]


def _newest_stamp_of_each_kind() -> list:
    """Per running job, the newest rank stamp of each kind of point, in one statement: a
    subquery a kind, each one seek in the (job, kind, time) index, where a max over the
    job's points would read all 100,000 of a long job."""
    return [select(func.max(MetricPoint.time))
            .where(MetricPoint.job_id == Job.id, MetricPoint.kind == kind)
            .correlate(Job).scalar_subquery() for kind in KINDS]


def _seconds(later: datetime, earlier: datetime) -> float:
    # SQLite hands back naive datetimes (stored as UTC); PostgreSQL aware ones.
    later, earlier = _utc(later), _utc(earlier)
    return max(0.0, (later - earlier).total_seconds())


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _jobs(counts: Sequence) -> Metric:
    family = GaugeMetricFamily("tunedeck_jobs", "jobs by status and queue",
                               labels=["status", "queue"])
    seen = {(status, queue): count for status, queue, count in counts}
    queues = {queue for _status, queue in seen} or {DEFAULT_QUEUE}
    for queue in sorted(queues):
        for status in STATUSES:  # every status, 0 included, so a rate or alert has a series
            family.add_metric([status, queue], seen.get((status, queue), 0))
    return family


def _workers(counts: dict[str, int]) -> Metric:
    family = GaugeMetricFamily("tunedeck_workers", "registered workers by state (online, "
                               "stopped: said goodbye, lost: fell silent)", labels=["state"])
    for state in sorted(set(WORKER_STATES) | set(counts)):
        family.add_metric([state], counts.get(state, 0))
    return family


def _durations(finished: Sequence) -> dict[tuple, list[float]]:
    by_outcome: dict[tuple, list[float]] = {(status,): [] for status in sorted(FINISHED_STATUSES)}
    for status, started_at, finished_at in finished:
        # A job cancelled or failed while queued never started: it has no duration.
        if started_at is not None:
            by_outcome[(status,)].append(_seconds(finished_at, started_at))
    return by_outcome


def _histogram(name: str, documentation: str, bounds: Sequence[float],
               values_by_labels: dict[tuple, list[float]], *,
               label_names: Sequence[str] = ()) -> Metric:
    family = GaugeHistogramMetricFamily(name, documentation, labels=list(label_names))
    for labels, values in values_by_labels.items():
        buckets = [(_bound(bound), sum(1 for value in values if value <= bound))
                   for bound in bounds]
        buckets.append(("+Inf", len(values)))
        family.add_metric(list(labels), buckets, gsum_value=sum(values))
    return family


def _bound(bound: float) -> str:
    return str(float(bound))


def _ingest_lag(running_ids: list[int], newest: dict[int, float], now: float) -> Metric:
    family = GaugeMetricFamily(
        "tunedeck_job_ingest_lag_seconds",
        "per running job: now minus the stamp of its newest stored metric point (a job "
        "that stored none yet has no series)", labels=["job_id"])
    for job_id in sorted(running_ids):
        if job_id in newest:
            family.add_metric([str(job_id)], max(0.0, now - newest[job_id]))
    return family


def _points_stored(highest_id: int) -> Metric:
    # Points are only inserted, their ids rising: the highest id counts every point ever
    # stored (less any of a removed newest job, which may make it step back once).
    family = CounterMetricFamily(
        "tunedeck_metric_points_stored",
        "metric points stored by all workers, as the highest stored id; rate() of it is "
        "points stored per second")
    family.add_metric([], highest_id)
    return family
