"""SQLAlchemy 2 models: jobs, their metric points and their events.

The job row is the only job state. Alembic migrations in `migrations/` create these tables.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String,
                        Text, UniqueConstraint)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # Set by "Resume": the next launch continues from the run folder's latest checkpoint.
    resume_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # How many times a worker has launched this job (a resume launches it again).
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Why a failed job failed, as a kind (out_of_memory, comm_timeout, nan_loss, input_error,
    # killed_by_signal, worker_lost, error) and the rank that failed first, when known.
    failure_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    failed_rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    run_dir: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    worker_host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # The worker that claimed it (workers.name) and the GPUs it holds there (indices as
    # that worker counts them); another job on the same worker gets disjoint ones.
    worker_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    gpu_indices: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    # When its id was last sent to the broker: a queued job not claimed long after is sent
    # again (a message lost with a broker restart must not strand it).
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    launcher_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utc_now, onupdate=utc_now
    )


class Worker(Base):
    """A worker process, from its heartbeats: where it runs, which queues it serves, what
    it has (GPUs with their live memory, or CPU and RAM), and when it was last seen."""

    __tablename__ = "workers"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    queues: Mapped[list[str]] = mapped_column(JSON)
    pid: Mapped[int] = mapped_column(Integer)
    concurrency: Mapped[int] = mapped_column(Integer)
    resources: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))  # online, stopped, lost
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MetricPoint(Base):
    """One event line of a rank's metrics file; (job, rank, seq) makes re-ingest idempotent."""

    __tablename__ = "metric_points"
    __table_args__ = (
        UniqueConstraint("job_id", "rank", "seq", name="uq_metric_points_job_rank_seq"),
        Index("ix_metric_points_job_kind_time", "job_id", "kind", "time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    rank: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    time: Mapped[float] = mapped_column(Float)
    values: Mapped[dict[str, Any]] = mapped_column(JSON)


class JobSample(Base):
    """What the worker sampled while a job ran, about once a second: a GPU (NVML: memory,
    utilisation, power, temperature) or a rank's process (RSS, CPU)."""

    __tablename__ = "job_samples"
    __table_args__ = (Index("ix_job_samples_job_time", "job_id", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Float)
    host: Mapped[str] = mapped_column(String(255))
    source: Mapped[str] = mapped_column(String(16))  # "gpu" or "process"
    index: Mapped[int] = mapped_column(Integer)  # the GPU's index, or the rank
    values: Mapped[dict[str, Any]] = mapped_column(JSON)


class JobEvent(Base):
    """What happened to a job, in words: status changes, notices, errors."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_time", "job_id", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    kind: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
