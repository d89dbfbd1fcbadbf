"""Metric points: batched, idempotent inserts from the worker; the series the web reads."""
from __future__ import annotations

import math
from typing import Any, Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tunedeck import metrics_event
from tunedeck.db.models import MetricPoint

TRAIN_SERIES_RANK = 0  # step and eval events carry all-rank figures; rank 0's row is the job's


def add_metric_points(*, session: Session, job_id: int,
                      events: Iterable[tuple[int, dict[str, Any]]]) -> int:
    """Insert (seq, event) pairs; a (job, rank, seq) already stored is skipped, not doubled."""
    rows = [_row(job_id, seq, event) for seq, event in events]
    if not rows:
        return 0
    insert = _dialect_insert(session)
    session.execute(insert(MetricPoint).values(rows).on_conflict_do_nothing(
        index_elements=["job_id", "rank", "seq"]))
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
            "values": values}


def read_job_metrics(*, session: Session, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """The API's metrics body: `train` (one row a step), `eval` (one row an evaluation),
    `memory` (one row a rank reading) and `footprint` (one row a rank)."""
    train = _rank_zero_series(session, job_id, metrics_event.STEP)
    evaluations = _rank_zero_series(session, job_id, metrics_event.EVAL)
    memory = session.execute(
        select(MetricPoint.time, MetricPoint.rank, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.MEMORY)
        .order_by(MetricPoint.time, MetricPoint.rank)
    )
    return {
        "train": _latest_per_step([{"time": time, **_pick(values, metrics_event.STEP_FIELDS)}
                                   for time, values in train]),
        "eval": _latest_per_step([{"time": time, **_pick(values, metrics_event.EVAL_FIELDS)}
                                  for time, values in evaluations]),
        "memory": [{"time": time, "rank": rank, **_pick(values, metrics_event.MEMORY_FIELDS)}
                   for time, rank, values in memory],
        "footprint": _latest_footprint_per_rank(session, job_id),
    }


def _latest_per_step(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row a step, in step order. A job resumed from a checkpoint runs the steps after
    it again; the rows written later (the resumed run's) are the ones that count."""
    by_step = {row["step"]: row for row in rows}
    return [by_step[step] for step in sorted(by_step)]


def _latest_footprint_per_rank(session: Session, job_id: int) -> list[dict[str, Any]]:
    """Each rank's measured bytes of parameters, gradients and optimizer state (its latest
    launch's), by rank."""
    rows = session.execute(
        select(MetricPoint.rank, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.FOOTPRINT)
        .order_by(MetricPoint.rank, MetricPoint.seq))
    latest = {rank: values for rank, values in rows}
    return [{"rank": rank, **_pick(values, metrics_event.FOOTPRINT_FIELDS)}
            for rank, values in sorted(latest.items())]


def _rank_zero_series(session: Session, job_id: int, kind: str):
    return session.execute(
        select(MetricPoint.time, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == kind,
               MetricPoint.rank == TRAIN_SERIES_RANK)
        .order_by(MetricPoint.seq)
    )


def _pick(values: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {field: _finite_or_none(values.get(field)) for field in fields}


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN or infinity (an fp16 step the loss scaler skips has an infinite
    gradient norm): such a value is stored, and read back, as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def latest_step_summary(*, session: Session, job_id: int) -> dict[str, Any] | None:
    """The newest rank-0 step row, for the jobs table."""
    values = session.scalar(
        select(MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.STEP,
               MetricPoint.rank == TRAIN_SERIES_RANK)
        .order_by(MetricPoint.seq.desc()).limit(1)
    )
    return values


def count_metric_points(*, session: Session, job_id: int) -> int:
    return session.scalar(select(func.count()).where(MetricPoint.job_id == job_id)) or 0
