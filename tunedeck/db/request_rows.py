"""The rows of the requests a worker answers for the web (tunedeck/worker_requests/): the web
inserts one pending with its request, a worker claims it and stores its result or the
error, and the web and the CLI read it back here (there is no Celery result backend).
Every kind has the same columns but its result's; only tunedeck.worker_requests.store
changes them."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from tunedeck.db.models import Base, utc_now


class WorkerRequestColumns:
    """What every request row has."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    status: Mapped[str] = mapped_column(String(16))  # tunedeck/worker_requests/states.py
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Who asked (users.name; null with open access): only they, or an admin, read it back.
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The worker that claimed it (a generation: the job's worker it was sent to, first).
    worker_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class DatasetPreflight(WorkerRequestColumns, Base):
    """A data preflight (tunedeck/data/preflight_request.py), run by a worker that could run
    such a job; its owner's uploads folder is readable to it."""

    __tablename__ = "dataset_preflights"

    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class JobGeneration(WorkerRequestColumns, Base):
    """A "Try it" request (tunedeck/generation/request.py), answered by the worker that ran
    the job (its run folder has the weights)."""

    __tablename__ = "job_generations"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    answer: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
