"""SQLAlchemy 2 models: jobs, their metric points and events, workers, accounts and presets
(the requests a worker answers are in request_rows.py).

The job row is the only job state. Alembic migrations in `migrations/` create these tables.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text,
                        UniqueConstraint)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics.events import EVAL, MEMORY, STEP
from tunedeck.metrics.figures import columns_of


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """A stored time as an aware UTC datetime: SQLite hands back naive ones (written in UTC),
    PostgreSQL aware ones."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


class StoredSpecInvalid(ValueError):
    """A job row whose stored spec this version's JobSpec rejects."""


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
    # A job on several nodes: where node 0 (this row's worker, ranks 0..) hosts the
    # rendezvous ("host:port"); the other nodes are in job_nodes.
    rendezvous: Mapped[str | None] = mapped_column(String(300), nullable=True)
    launcher_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The job's Slurm job, once a Slurm executor submitted it (its sbatch --parsable id).
    slurm_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # The account that submitted it (users.name); null for jobs submitted with open access.
    # A user sees and controls their own jobs, an admin everyone's.
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    # Archived jobs are left out of listings unless asked for; nothing else changes.
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    # When a worker first started it: a resume or a restart keeps it (the job's start).
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # When a worker last claimed it (each start, a resume's too): what a starting worker's
    # recovery compares with its own start.
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utc_now, onupdate=utc_now
    )

    @property
    def spec_model(self) -> JobSpec:
        """The stored spec as the typed model: every reader's one way in (no dict, no
        defaults copied by hand). Stored specs were validated on the way in, so this fails
        only for a row an older TuneDeck stored under rules the spec has since dropped."""
        try:
            return JobSpec.model_validate(self.spec)
        except ValueError as error:
            raise StoredSpecInvalid(f"job {self.id}: its stored spec is no longer valid: "
                                    f"{error}") from error


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


class JobNode(Base):
    """Node K > 0 of a job on several nodes: the worker it was given to, the GPUs it holds
    there, and whether that node's torchrun started and how it ended."""

    __tablename__ = "job_nodes"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                        primary_key=True)
    node_rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker_name: Mapped[str] = mapped_column(String(255), index=True)
    host: Mapped[str] = mapped_column(String(255))
    gpu_indices: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    state: Mapped[str] = mapped_column(String(16))  # assigned, started, exited
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)


class MetricPoint(Base):
    """One event line of a rank's metrics file; (job, rank, seq) makes re-ingest idempotent."""

    __tablename__ = "metric_points"
    __table_args__ = (
        UniqueConstraint("job_id", "rank", "seq", name="uq_metric_points_job_rank_seq"),
        # Covering indexes: the chart reads every point's figures from these alone, in the
        # order it needs (a step series by step then line, memory by time then rank),
        # never touching the rows' JSON. The memory one also serves (job, kind, time).
        Index("ix_metric_points_series_figures", "job_id", "kind", "rank", "step", "seq", "id",
              *columns_of(STEP), *columns_of(EVAL)),
        Index("ix_metric_points_memory_figures", "job_id", "kind", "time", "rank", "id",
              *columns_of(MEMORY)),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    rank: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    time: Mapped[float] = mapped_column(Float)
    values: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The charted figures, copied out of `values` on insert (null when absent or not a
    # finite number), so a 100,000-step chart is downsampled without parsing its JSON:
    # tunedeck.metrics.figures.FIGURE_COLUMNS, one a figure (a test checks they agree).
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    tokens_per_second: Mapped[float | None] = mapped_column(Float, nullable=True)
    learning_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    grad_norm: Mapped[float | None] = mapped_column(Float, nullable=True)
    step_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    eval_loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    allocated_mb: Mapped[float | None] = mapped_column(Float, nullable=True)
    rss_mb: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_reserved_mb: Mapped[float | None] = mapped_column(Float, nullable=True)


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


class User(Base):
    """An account: a name, a password hash (Argon2id; never the password), and a role."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    password_hash: Mapped[str] = mapped_column(String(300))
    role: Mapped[str] = mapped_column(String(16))  # user, admin
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)


class Credential(Base):
    """An API token or a browser session of a user. Only the SHA-256 of the secret is kept,
    so a copy of the database lets nobody in; `kind` says which it is."""

    __tablename__ = "credentials"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # token, session
    user_name: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"), index=True)
    label: Mapped[str] = mapped_column(String(200), default="")
    # The first characters of a token, to tell a user's tokens apart when listing them.
    hint: Mapped[str] = mapped_column(String(16), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class AuditEvent(Base):
    """Who did what to which job, and when: submissions, cancels, resumes, downloads,
    sign-ins and token changes. Rows are only ever added."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_time", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    # No foreign key: the trail outlives anything it names.
    job_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    detail: Mapped[str] = mapped_column(Text, default="")
    client: Mapped[str | None] = mapped_column(String(100), nullable=True)


class Preset(Base):
    """A named New job form: the spec it would submit, kept per user to load again."""

    __tablename__ = "presets"
    # Open-access presets have no owner; SQL counts NULLs as distinct, so tunedeck.presets
    # finds a same-named one itself before it inserts rather than relying on this alone.
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_presets_owner_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # users.name; null for presets saved with open access (as jobs.owner).
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    name: Mapped[str] = mapped_column(String(80))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utc_now, onupdate=utc_now
    )

    @property
    def spec_model(self) -> JobSpec:
        """The stored spec as the typed model (as Job.spec_model)."""
        try:
            return JobSpec.model_validate(self.spec)
        except ValueError as error:
            raise StoredSpecInvalid(f"preset {self.name!r}: its stored spec is no longer "
                                    f"valid: {error}") from error
