"""The Compare tab's and the job page's "Compare backends" handlers: plain values in, plain
values (frames, text) out. The numbers come from app.views.job_compare, as the API's do."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from app.actions.compare_backends import compare_backends
from app.actions.errors import NotFound, Refused
from app.actions.job_lookup import find_visible_job
from app.auth.principal import Principal
from app.ui.job_ids import parse_job_id
from app.views.job_compare import BadJobIds, compare_jobs, parse_job_ids
from tunedeck import job_store
from tunedeck.job_spec import JobSpec
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
    # Each chart's lines, by job, before they have points: {"loss" | "throughput" | "memory": names}
    lines: dict[str, list[str]] = field(default_factory=dict)


def load_comparison(ids_text: str | None, *, database, principal: Principal) -> Comparison:
    if not (ids_text or "").strip():
        return Comparison(NO_COMPARISON)
    try:
        job_ids = parse_job_ids(ids_text)
        specs = _visible_specs(database, principal, job_ids)
        compared = compare_jobs(database=database, job_ids=job_ids,
                                max_points=COMPARE_CHART_POINTS)
    except (BadJobIds, NotFound, job_store.JobNotFound) as problem:
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
        lines=_every_line(labels, specs),
    )


def _visible_specs(database, principal: Principal, job_ids: list[int]) -> dict[int, JobSpec]:
    """Each job's spec; NotFound for a job the principal may not see."""
    with database.transaction() as session:
        return {job_id: find_visible_job(session=session, principal=principal,
                                         job_id=job_id).spec_model for job_id in job_ids}


def _every_line(labels: dict[int, str], specs: dict[int, JobSpec]) -> dict[str, list[str]]:
    """The lines each chart draws once every job reports: a loss line a job (and its eval
    line when it has an eval set), a throughput line a job, and a memory line a rank."""
    loss, memory = [], []
    for job_id, label in labels.items():
        loss.append(label)
        if specs[job_id].has_eval:
            loss.append(_loss_line(label, "eval"))
        memory += [f"{label} rank {rank}" for rank in range(specs[job_id].world_size)]
    return {"loss": loss, "throughput": list(labels.values()), "memory": memory}


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


def with_every_line(frame: pd.DataFrame, lines: list[str]) -> pd.DataFrame:
    """The frame after one empty (NaN) row for each line the chart will draw, in job order.

    Why: the chart fixes its colours and legend from the lines in the data it is first drawn
    with (as `job_handlers.memory_frame` says), so a job that reports only later (queued
    behind another) would be drawn without a colour and left out of the legend. The rows
    also keep each job's colour stable. Plots skip the NaN rows."""
    if not lines:
        return frame
    placeholders = _frame([(None, None, line) for line in lines], list(frame.columns))
    return pd.concat([placeholders, frame], ignore_index=True) if len(frame) else placeholders


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _frame(points: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Numbers stay numbers even when empty (see job_handlers._typed_frame)."""
    frame = pd.DataFrame(points, columns=columns)
    return frame.astype({column: ("string" if column == "job" else "float64")
                         for column in columns})


def compare_backends_from_page(job_id: Any, *, database, celery_app,
                               principal: Principal) -> tuple[str, str | None]:
    """Start the ZeRO-2 and FSDP copies of the job: the message, and the ids to compare
    (None when nothing started)."""
    job_id = parse_job_id(job_id)
    if job_id is None:
        return "Pick a job first.", None
    try:
        jobs = compare_backends(principal, job_id, database=database, celery_app=celery_app)
    except NotFound:
        return f"There is no job {job_id}.", None
    except Refused as reason:
        return f"Not compared: {reason}", None
    ids = f"{jobs[0].id}, {jobs[1].id}"
    return (f"Started jobs {jobs[0].id} and {jobs[1].id}; open Compare with ids "
            f"{jobs[0].id},{jobs[1].id}"), ids
