"""Metric points: batched, idempotent inserts from the worker; the series the web reads."""
from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tunedeck import metrics_event
from tunedeck.db.models import MetricPoint

TRAIN_SERIES_RANK = 0  # step events carry all-rank figures; rank 0's row is the job's


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


def _dialect_insert(session: Session):
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def _row(job_id: int, seq: int, event: dict[str, Any]) -> dict[str, Any]:
    values = {key: value for key, value in event.items() if key not in ("kind", "rank", "time")}
    step = event.get("step")
    return {"job_id": job_id, "kind": event["kind"], "rank": event["rank"], "seq": seq,
            "step": step if isinstance(step, int) else None, "time": float(event["time"]),
            "values": values}


def read_job_metrics(*, session: Session, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """The API's metrics body: `train` (one row a step) and `memory` (one row a rank reading)."""
    train = session.execute(
        select(MetricPoint.time, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.STEP,
               MetricPoint.rank == TRAIN_SERIES_RANK)
        .order_by(MetricPoint.seq)
    )
    memory = session.execute(
        select(MetricPoint.time, MetricPoint.rank, MetricPoint.values)
        .where(MetricPoint.job_id == job_id, MetricPoint.kind == metrics_event.MEMORY)
        .order_by(MetricPoint.time, MetricPoint.rank)
    )
    return {
        "train": [{"time": time, **_pick(values, metrics_event.STEP_FIELDS)}
                  for time, values in train],
        "memory": [{"time": time, "rank": rank, **_pick(values, metrics_event.MEMORY_FIELDS)}
                   for time, rank, values in memory],
    }


def _pick(values: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {field: values.get(field) for field in fields}


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
