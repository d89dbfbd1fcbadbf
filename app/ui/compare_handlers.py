"""The Compare tab's and the job page's "Compare backends" handlers: plain values in, plain
values (frames, text) out. The numbers come from app.job_compare, as the API's do."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from app.backend_comparison import ComparisonRefused, compare_backends
from app.job_compare import BadJobIds, compare_jobs, parse_job_ids
from app.ui.job_ids import parse_job_id
from tunedeck import job_store
from tunedeck.job_states import FINISHED_STATUSES

LOSS_COLUMNS = ["step", "loss", "job"]
THROUGHPUT_COLUMNS = ["step", "tokens_per_second", "job"]
MEMORY_COLUMNS = ["seconds", "memory_mb", "job"]
DIFF_COLUMNS = ["field"]
COMPARE_CHART_POINTS = 1000  # per line; several jobs share one chart
NO_COMPARISON = "Type two or more job ids, e.g. `3, 5, 8`, and press Compare."


@dataclass(frozen=True)
class Comparison:
    """What the Compare tab shows; `running` keeps its timer going."""

    message: str
    loss: pd.DataFrame = field(default_factory=lambda: _frame([], LOSS_COLUMNS))
    throughput: pd.DataFrame = field(default_factory=lambda: _frame([], THROUGHPUT_COLUMNS))
    memory: pd.DataFrame = field(default_factory=lambda: _frame([], MEMORY_COLUMNS))
    diff: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DIFF_COLUMNS))
    running: bool = False


def load_comparison(ids_text: str | None, *, database) -> Comparison:
    if not (ids_text or "").strip():
        return Comparison(NO_COMPARISON)
    try:
        compared = compare_jobs(database=database, job_ids=parse_job_ids(ids_text),
                                max_points=COMPARE_CHART_POINTS)
    except (BadJobIds, job_store.JobNotFound) as problem:
        return Comparison(f"Cannot compare: {problem}.")
    labels = {job["id"]: job_label(job) for job in compared["jobs"]}
    series = compared["series"]
    return Comparison(
        message=_summary(compared["jobs"]),
        loss=_frame([(row["step"], row["loss"], _loss_line(labels[row["job_id"]], row["kind"]))
                     for row in series["loss"]], LOSS_COLUMNS),
        throughput=_frame([(row["step"], row["tokens_per_second"], labels[row["job_id"]])
                           for row in series["tokens_per_second"]], THROUGHPUT_COLUMNS),
        memory=_frame([(row["seconds"], row["memory_mb"],
                        f"{labels[row['job_id']]} rank {row['rank']}")
                       for row in series["memory"]], MEMORY_COLUMNS),
        diff=diff_frame(compared["diff"], list(labels.values())),
        running=any(job["status"] not in FINISHED_STATUSES for job in compared["jobs"]),
    )


def job_label(job: dict[str, Any]) -> str:
    return f"job {job['id']} ({job.get('backend') or '?'})"


def _loss_line(label: str, kind: str) -> str:
    return label if kind == "train" else f"{label} eval"


def _summary(jobs: list[dict[str, Any]]) -> str:
    return "Comparing " + " · ".join(f"**job {job['id']}** {job['name']} `{job['status']}`"
                                     for job in jobs)


def diff_frame(diff: list[dict[str, Any]], labels: list[str]) -> pd.DataFrame:
    """One row a differing field, one column a job."""
    rows = [[entry["field"], *(_cell(value) for value in entry["values"])] for entry in diff]
    return pd.DataFrame(rows, columns=DIFF_COLUMNS + labels)


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _frame(points: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Numbers stay numbers even when empty (see job_handlers._typed_frame)."""
    frame = pd.DataFrame(points, columns=columns)
    return frame.astype({column: ("string" if column == "job" else "float64") for column in columns})


def compare_backends_from_page(job_id: Any, *, database, celery_app) -> tuple[str, str | None]:
    """Start the ZeRO-2 and FSDP copies of the job: the message, and the ids to compare
    (None when nothing started)."""
    job_id = parse_job_id(job_id)
    if job_id is None:
        return "Pick a job first.", None
    try:
        jobs = compare_backends(database=database, celery_app=celery_app, job_id=job_id)
    except job_store.JobNotFound:
        return f"There is no job {job_id}.", None
    except ComparisonRefused as reason:
        return f"Not compared: {reason}", None
    ids = f"{jobs[0].id}, {jobs[1].id}"
    return (f"Started jobs {jobs[0].id} and {jobs[1].id}; open Compare with ids "
            f"{jobs[0].id},{jobs[1].id}"), ids
