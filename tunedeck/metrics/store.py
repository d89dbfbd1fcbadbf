"""Metric points: batched, idempotent inserts from the worker; the series the web reads."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from tunedeck.db.models import Job, MetricPoint
from tunedeck.metrics import chart_cache, events as metrics_event, figures
from tunedeck.metrics.downsample import keep_positions
from tunedeck.metrics.postgres_copy import copied_metric_points

TRAIN_SERIES_RANK = 0  # step and eval events carry all-rank figures; rank 0's row is the job's


def add_metric_points(*, session: Session, job_id: int,
                      events: Iterable[tuple[int, dict[str, Any]]]) -> int:
    """Insert (seq, event) pairs; a (job, rank, seq) already stored is skipped, not doubled."""
    rows = [_row(job_id, seq, event) for seq, event in events]
    if not rows:
        return 0
    dialect = session.get_bind().dialect
    if dialect.name == "postgresql" and dialect.driver == "psycopg" and copied_metric_points(session, rows):
        return len(rows)
    # One statement compiled once (and cached), its rows sent as parameter sets: SQLAlchemy
    # batches them into multi-row INSERTs itself ("insertmanyvalues"), where a statement of
    # literal VALUES would be compiled anew for every batch.
    session.execute(_dialect_insert(session)(MetricPoint).on_conflict_do_nothing(
        index_elements=["job_id", "rank", "seq"]), rows)
    return len(rows)


def last_seq_by_rank(*, session: Session, job_id: int) -> dict[int, int]:
    """The highest line number stored for each rank of the job."""
    rows = session.execute(select(MetricPoint.rank, func.max(MetricPoint.seq))
                           .where(MetricPoint.job_id == job_id).group_by(MetricPoint.rank))
    return {rank: seq for rank, seq in rows}


def _dialect_insert(session: Session):
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def _row(job_id: int, seq: int, event: dict[str, Any]) -> dict[str, Any]:
    # Stored as null: PostgreSQL's JSON rejects NaN and Infinity outright.
    values = {key: _finite_or_none(value) for key, value in event.items()
              if key not in ("kind", "rank", "time")}
    step = event.get("step")
    return {"job_id": job_id, "kind": event["kind"], "rank": event["rank"], "seq": seq,
            "step": step if isinstance(step, int) else None, "time": float(event["time"]),
            "values": values, **chart_figure_columns(values)}


def chart_figure_columns(values: dict[str, Any]) -> dict[str, float | None]:
    """The figure columns of a point with these (sanitised) values, for whoever writes
    `metric_points` rows: each number as a float; null for anything else (missing, null, a
    string, a bool), as migration 0005 backfilled the rows written before it."""
    return {figure.column: float(value) if isinstance(value, (int, float))
            and not isinstance(value, bool) else None
            for figure in figures.FIGURES if figure.column is not None
            for value in (values.get(figure.field),)}


def read_job_metrics(*, session: Session, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """Every point of `read_chart_metrics`, none dropped (one reading path for both)."""
    return read_chart_metrics(session=session, job_id=job_id, max_points=ALL_POINTS)


# The figure columns of each series (tunedeck.metrics.figures): read from a covering index,
# their extremes survive downsampling.
TRAIN_CHART_COLUMNS = figures.columns_of(metrics_event.STEP)
EVAL_CHART_COLUMNS = figures.columns_of(metrics_event.EVAL)
MEMORY_CHART_COLUMNS = figures.columns_of(metrics_event.MEMORY)
IDS_PER_QUERY = 5000  # within every database's limit on bound parameters
ALL_POINTS = 2**62  # a max_points no series reaches


def read_chart_metrics(*, session: Session, job_id: int,
                       max_points: int) -> dict[str, list[dict[str, Any]]]:
    """`read_job_metrics`, with each line (a series, a rank's memory) downsampled to at
    most `max_points` (min and max a bucket). The figures come from their own columns, out
    of a covering index, and stay in memory between requests (`chart_cache`: a poll reads
    only the rows added since, and the JSON of only the kept points not built before), so
    a 100,000-step job costs little more than a 2,000-step one."""
    job = session.get(Job, job_id)
    # One node, one writer of its points: their ids become visible in order (chart_cache).
    single_writer = job is not None and job.spec_model.num_nodes == 1
    return {
        "train": _downsampled_step_series(session, job_id, metrics_event.STEP, TRAIN_CHART_COLUMNS,
                                          metrics_event.STEP_FIELDS, max_points, single_writer),
        "eval": _downsampled_step_series(session, job_id, metrics_event.EVAL, EVAL_CHART_COLUMNS,
                                         metrics_event.EVAL_FIELDS, max_points, single_writer),
        "memory": _downsampled_memory(session, job_id, max_points, single_writer),
        "footprint": _latest_footprint_per_rank(session, job_id),
    }


def _downsampled_step_series(session: Session, job_id: int, kind: str, columns: tuple[str, ...],
                             fields: tuple[str, ...], max_points: int,
                             single_writer: bool) -> list[dict[str, Any]]:
    line_set = chart_cache.read_line_set(
        session, key=(job_id, kind), order_width=2, fetch_table=_float_table,
        single_writer=single_writer,
        columns=(MetricPoint.id, MetricPoint.rank, MetricPoint.step, MetricPoint.seq,
                 *_figure_columns(columns)),
        where=(MetricPoint.job_id == job_id, MetricPoint.kind == kind,
               MetricPoint.rank == TRAIN_SERIES_RANK, MetricPoint.step.is_not(None)))
    line = line_set.lines.get(TRAIN_SERIES_RANK)
    if line is None:
        return []
    latest = _last_row_of_each_step(line[:, 2])  # a resumed run's rows win
    kept = latest[keep_positions(np.ascontiguousarray(line[latest, 4:].T), max_points)]
    return _answer_rows(session, line_set, _ids(line, kept),
                        lambda time, _rank, values: {"time": time, **_pick(
                            values, fields, optional=metrics_event.OBJECTIVE_FIELDS)})


def _last_row_of_each_step(steps: np.ndarray) -> np.ndarray:
    """Positions (of rows in step, then line order) of each step's last row: a step run
    again after a resume counts once, with the later values."""
    return np.flatnonzero(np.append(steps[1:] != steps[:-1], True))


def _downsampled_memory(session: Session, job_id: int, max_points: int,
                        single_writer: bool) -> list[dict[str, Any]]:
    line_set = chart_cache.read_line_set(
        session, key=(job_id, metrics_event.MEMORY), order_width=1, fetch_table=_float_table,
        single_writer=single_writer,
        columns=(MetricPoint.id, MetricPoint.rank, MetricPoint.time,
                 *_figure_columns(MEMORY_CHART_COLUMNS)),
        where=(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.MEMORY))
    kept = [line[keep_positions(np.ascontiguousarray(line[:, 3:].T), max_points)]
            for line in line_set.lines.values()]
    if not kept:
        return []
    kept_rows = np.concatenate(kept)
    # Time, then rank order, as one chart draws the lines.
    kept_rows = kept_rows[np.lexsort((kept_rows[:, 0], kept_rows[:, 1], kept_rows[:, 2]))]
    return _answer_rows(session, line_set, _ids(kept_rows, slice(None)),
                        lambda time, rank, values: {"time": time, "rank": rank,
                                                    **_pick(values, metrics_event.MEMORY_FIELDS)})


def _answer_rows(session: Session, line_set: chart_cache.LineSet, ids: list[int],
                 build: Callable[[float, int, dict[str, Any]], dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """The answer row of each id, in order: built from the row's JSON once, then held with
    the line set (a point never changes); each caller gets its own copies."""
    known = {point_id: row for point_id in ids
             if (row := line_set.rows.get(point_id)) is not None}
    missing = [point_id for point_id in ids if point_id not in known]
    known.update((point_id, build(*point))
                 for point_id, point in zip(missing, _points_by_id(session, missing)))
    chart_cache.remember_rows(line_set, known)
    return [dict(known[point_id]) for point_id in ids]


def _figure_columns(columns: tuple[str, ...]) -> list:
    return [MetricPoint.__table__.c[column] for column in columns]


def _float_table(session: Session, statement: Select) -> np.ndarray:
    """The statement's rows (numbers or null only) as one float array, a row a point, NaN
    for null. Executed through SQLAlchemy (its compiled-statement cache: compiling this
    statement anew took 2 ms, three times a poll) but fetched from the driver's own
    cursor: for 200,000 points, building SQLAlchemy rows and transposing them took longer
    than the query itself."""
    result = session.connection().execute(statement)
    try:
        rows = result.cursor.fetchall()
    finally:
        result.close()
    return np.array(rows, dtype=float).reshape(len(rows), len(statement.selected_columns))


def _ids(table: np.ndarray, positions: np.ndarray) -> list[int]:
    """The ids (column 0, exact as floats below 2**53) of the rows at `positions`."""
    return table[positions, 0].astype(np.int64).tolist()


def _points_by_id(session: Session, ids: list[int]) -> list[tuple[float, int, dict[str, Any]]]:
    """(time, rank, values) of each id, in the order of `ids`."""
    by_id = {}
    for start in range(0, len(ids), IDS_PER_QUERY):
        by_id.update((point_id, (time, rank, values)) for point_id, time, rank, values in
                     session.connection().execute(select(MetricPoint.id, MetricPoint.time, MetricPoint.rank,
                                            MetricPoint.values)
                                     .where(MetricPoint.id.in_(ids[start:start + IDS_PER_QUERY]))))
    return [by_id[point_id] for point_id in ids]


def _latest_footprint_per_rank(session: Session, job_id: int) -> list[dict[str, Any]]:
    """Each rank's measured bytes of parameters, gradients and optimizer state (its latest
    launch's), by rank."""
    # Sorted here, not in SQL: ORDER BY rank, seq led SQLite to walk the job's every row
    # (by the unique index on job, rank, seq) for these few.
    rows = session.execute(
        select(MetricPoint.rank, MetricPoint.seq, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.FOOTPRINT))
    latest = {rank: values for rank, _seq, values in sorted(rows, key=lambda row: row[:2])}
    return [{"rank": rank, **_pick(values, metrics_event.FOOTPRINT_FIELDS)}
            for rank, values in sorted(latest.items())]


# A step's rollout is stored once a launch that ran it: rows read for `limit` distinct steps.
ROLLOUT_REPEATS = 4


def read_rollouts(*, session: Session, job_id: int, limit: int) -> list[dict[str, Any]]:
    """A GRPO job's kept rollouts (events.ROLLOUT), newest step first, at most `limit`: each
    {step, time, samples}. A step a resumed run sampled again counts once, the later one."""
    rows = session.execute(
        select(MetricPoint.step, MetricPoint.time, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.ROLLOUT)
        .order_by(MetricPoint.step.desc(), MetricPoint.id.desc())
        .limit(limit * ROLLOUT_REPEATS))
    rollouts, seen = [], set()
    for step, time, values in rows:
        if step in seen:
            continue
        seen.add(step)
        rollouts.append({"step": step, "time": time, "samples": values.get("samples", [])})
        if len(rollouts) == limit:
            break
    return rollouts


def latest_phase(*, session: Session, job_id: int) -> list[dict[str, Any]]:
    """The job's newest phase line (events.PHASE: what it does before step 1), as a list of
    one, or none before the first; the newest of any rank, since a node's first rank
    tokenizes and rank 0 loads."""
    row = session.execute(
        select(MetricPoint.rank, MetricPoint.time, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.PHASE)
        .order_by(MetricPoint.time.desc(), MetricPoint.id.desc()).limit(1)).first()
    if row is None:
        return []
    rank, time, values = row
    return [{"rank": rank, "time": time, **_pick(values, metrics_event.PHASE_FIELDS)}]


def _pick(values: dict[str, Any], fields: tuple[str, ...],
          optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """`fields` of a point (None where it has no such value); an `optional` field only
    where the point carries it (an SFT step's row has no preference figures, not six nulls)."""
    return {field: _finite_or_none(values.get(field)) for field in fields
            if field in values or field not in optional}


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN or infinity (an fp16 step the loss scaler skips has an infinite
    gradient norm): such a value is stored, and read back, as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def newest_step_rows(*, session: Session, job_ids: list[int]) -> dict[int, dict[str, Any]]:
    """The newest rank-0 step row of each job that has one (by job id), in one query
    however many jobs (GET /api/jobs' `latest`, the jobs table)."""
    if not job_ids:
        return {}
    newest = (select(MetricPoint.job_id, func.max(MetricPoint.seq).label("seq"))
              .where(MetricPoint.job_id.in_(job_ids), MetricPoint.kind == metrics_event.STEP,
                     MetricPoint.rank == TRAIN_SERIES_RANK)
              .group_by(MetricPoint.job_id).subquery())
    return dict(session.execute(
        select(MetricPoint.job_id, MetricPoint.values)
        .join(newest, (MetricPoint.job_id == newest.c.job_id) & (MetricPoint.seq == newest.c.seq))
        .where(MetricPoint.rank == TRAIN_SERIES_RANK)).all())


def job_table_summaries(*, session: Session, job_ids: list[int]) -> dict[int, dict[str, Any]]:
    """For each job: its newest rank-0 step row and `peak_mb`, the most memory any rank
    reported (the allocator's peak on a GPU, else the process RSS). Two queries for the
    whole jobs table, however many jobs it shows."""
    if not job_ids:
        return {}
    summaries: dict[int, dict[str, Any]] = {job_id: {} for job_id in job_ids}
    for job_id, values in newest_step_rows(session=session, job_ids=job_ids).items():
        summaries[job_id].update(values)
    peaks = session.execute(
        select(MetricPoint.job_id, func.max(MetricPoint.values["peak_mb"].as_float()),
               func.max(MetricPoint.values[figures.RSS_MB.field].as_float()))
        .where(MetricPoint.job_id.in_(job_ids), MetricPoint.kind == metrics_event.MEMORY)
        .group_by(MetricPoint.job_id))
    for job_id, peak_mb, rss_mb in peaks:
        summaries[job_id]["peak_mb"] = peak_mb if peak_mb is not None else rss_mb
    return summaries


def read_points_after(*, session: Session, job_id: int, last_seq_by_rank: dict[int, int],
                      limit: int) -> list[tuple[str, int, int, int | None, float, dict[str, Any]]]:
    """The job's stored points past a reader's cursor (the last line it has of each rank),
    oldest first, at most `limit`: (kind, rank, seq, step, time, values). A rank's lines are
    stored by one writer, in order, so a cursor per rank never skips a line stored late."""
    from sqlalchemy import and_, or_

    past_cursor = [and_(MetricPoint.rank == rank, MetricPoint.seq > seq)
                   for rank, seq in last_seq_by_rank.items()]
    past_cursor.append(MetricPoint.rank.not_in(list(last_seq_by_rank)))
    rows = session.execute(
        select(MetricPoint.kind, MetricPoint.rank, MetricPoint.seq, MetricPoint.step,
               MetricPoint.time, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, or_(*past_cursor))
        .order_by(MetricPoint.id).limit(limit))
    return [tuple(row) for row in rows]
