"""The worker's GPU and process samples (table `job_samples`): written in batches with the
metric ingest, read back as downsampled lines, one a GPU or a rank."""
from __future__ import annotations

import math
from typing import Any, Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from tunedeck.db.models import JobSample
from tunedeck.metrics import figures
from tunedeck.metrics.downsample import DEFAULT_MAX_POINTS, downsample_tuples

GPU = figures.GPU_SAMPLE
PROCESS = figures.PROCESS_SAMPLE
SOURCES = (GPU, PROCESS)
# The figures of each source, in MiB like the ranks' own memory readings.
GPU_FIELDS = ("used_mb", "total_mb", "utilization_percent", "power_w", "temperature_c")
PROCESS_FIELDS = ("pid", "rss_mb", "cpu_percent")
# What each source's line is called in the API's rows.
INDEX_NAMES = {GPU: "gpu", PROCESS: "rank"}
FIELDS = {GPU: GPU_FIELDS, PROCESS: PROCESS_FIELDS}
# The figures of each source whose extremes survive downsampling (tunedeck.metrics.figures).
CHARTED_FIELDS = {source: tuple(figure.field for figure in figures.figures_of(source))
                  for source in SOURCES}
IDS_PER_QUERY = 5000  # within every database's limit on bound parameters


def add_samples(*, session: Session, job_id: int, samples: Iterable[dict[str, Any]]) -> int:
    """Insert samples ({"time", "host", "source", "index", "values"}); returns how many."""
    rows = [{"job_id": job_id, "time": float(sample["time"]), "host": sample["host"],
             "source": sample["source"], "index": int(sample["index"]),
             "values": {key: _finite_or_none(value) for key, value in sample["values"].items()}}
            for sample in samples]
    if rows:
        session.execute(JobSample.__table__.insert(), rows)
    return len(rows)


def read_samples(*, session: Session, job_id: int, source: str,
                 max_points: int = DEFAULT_MAX_POINTS) -> list[dict[str, Any]]:
    """One row a sample, in time order, each line (host and GPU, or host and rank)
    downsampled to at most `max_points`: {"time", "host", "gpu" | "rank", figures...}."""
    if source not in SOURCES:
        raise ValueError(f"unknown sample source {source!r}; expected one of {SOURCES}")
    index_name, fields = INDEX_NAMES[source], FIELDS[source]
    # The charted figures come out of SQL first; only the kept samples' JSON is read.
    found = session.execute(
        select(JobSample.id, JobSample.host, JobSample.index,
               *(JobSample.values[key].as_float() for key in CHARTED_FIELDS[source]))
        .where(JobSample.job_id == job_id, JobSample.source == source)
        .order_by(JobSample.time, JobSample.index)).all()
    kept = downsample_tuples(found, group_width=2, max_points=max_points)
    by_id = {}
    for start in range(0, len(kept), IDS_PER_QUERY):
        by_id.update((sample_id, rest) for sample_id, *rest in session.execute(
            select(JobSample.id, JobSample.time, JobSample.host, JobSample.index, JobSample.values)
            .where(JobSample.id.in_(kept[start:start + IDS_PER_QUERY]))))
    return [{"time": time, "host": host, index_name: index,
             **{field: values.get(field) for field in fields}}
            for time, host, index, values in (by_id[sample_id] for sample_id in kept)]


def _finite_or_none(value: Any) -> Any:
    # PostgreSQL's JSON rejects NaN and infinity.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_samples_after(*, session: Session, job_id: int, last_id_by_host: dict[str, int],
                       limit: int) -> list[tuple[int, float, str, str, int, dict[str, Any]]]:
    """The job's samples past a reader's cursor (the last sample id it has of each host),
    oldest first, at most `limit`: (id, time, host, source, index, values). One worker
    stores a host's samples, a poll at a time, so its ids become visible in order."""
    from sqlalchemy import and_, or_

    past_cursor = [and_(JobSample.host == host, JobSample.id > last_id)
                   for host, last_id in last_id_by_host.items()]
    past_cursor.append(JobSample.host.not_in(list(last_id_by_host)))
    rows = session.execute(
        select(JobSample.id, JobSample.time, JobSample.host, JobSample.source, JobSample.index,
               JobSample.values)
        .where(JobSample.job_id == job_id, or_(*past_cursor)).order_by(JobSample.id).limit(limit))
    return [tuple(row) for row in rows]
