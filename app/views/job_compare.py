"""Comparing jobs: their loss, throughput and memory lines overlaid (each row names its job),
a preference job's reward figures too, and the spec fields whose values differ between
them. The API and the Compare tab share it."""
from __future__ import annotations

from typing import Any

from tunedeck.jobs import queries as job_queries
from tunedeck.db.engine import Database
from tunedeck.db.models import Job, as_utc, utc_now
from tunedeck.jobs.queries import MAX_JOB_ID
from tunedeck.metrics import store as metric_store
from tunedeck.metrics.downsample import DEFAULT_MAX_POINTS
from tunedeck.metrics.figures import (EVAL_LOSS, LOSS, OBJECTIVE_CHARTS, REWARD,
                                      REWARD_ACCURACY, REWARD_MARGIN, TOKENS_PER_SECOND,
                                      rank_memory_mb)
from tunedeck.metrics.store import read_chart_metrics

MAX_COMPARED_JOBS = 12  # more lines than that is no longer a comparison anyone can read


class BadJobIds(ValueError):
    """The ids are not a list of 2 or more job numbers."""


def parse_job_ids(text: str | None) -> list[int]:
    """"3, 5, 8" (commas or spaces) as distinct ids in the order given."""
    parts = (text or "").replace(",", " ").split()
    try:
        ids = [int(part) for part in parts]
    except ValueError as error:
        raise BadJobIds(f"job ids must be whole numbers separated by commas, got {text!r}") from error
    if any(job_id < 1 for job_id in ids):
        raise BadJobIds(f"job ids are positive numbers, got {text!r}")
    if any(job_id > MAX_JOB_ID for job_id in ids):
        # Beyond the jobs.id column's range the driver would raise (a 500), not find no row.
        raise BadJobIds(f"job ids are at most {MAX_JOB_ID}, got {text!r}")
    ids = list(dict.fromkeys(ids))
    if len(ids) < 2:
        raise BadJobIds("name at least 2 different jobs to compare")
    if len(ids) > MAX_COMPARED_JOBS:
        raise BadJobIds(f"compare at most {MAX_COMPARED_JOBS} jobs at a time")
    return ids


def compare_jobs(*, database: Database, job_ids: list[int],
                 max_points: int = DEFAULT_MAX_POINTS) -> dict[str, Any]:
    """The jobs, their spec diff and their overlaid series; JobNotFound names a missing id."""
    with database.transaction() as session:
        jobs = [job_queries.get_job(session=session, job_id=job_id) for job_id in job_ids]
        metrics = {job.id: read_chart_metrics(session=session, job_id=job.id,
                                              max_points=max_points) for job in jobs}
        peaks = metric_store.job_table_summaries(session=session, job_ids=job_ids)
        return {"jobs": [{**job_summary(job),
                          "figures": job_figures(job, metrics[job.id], peaks.get(job.id))}
                         for job in jobs],
                "diff": spec_diff([job.spec_model.model_dump(mode="json") for job in jobs]),
                "series": overlaid_series(metrics)}


RECENT_STEPS = 20  # tokens/s is the mean of the newest steps: the warm-up's first is slow
# A preference or RL job's figures, each the mean of its newest steps (one step's is noisy).
RECENT_PREFERENCE_FIGURES = (REWARD_MARGIN, REWARD_ACCURACY, REWARD)
PREFERENCE_FIGURES = tuple(figure for chart in OBJECTIVE_CHARTS for figure in chart.figures)


def job_figures(job: Job, metrics: dict[str, list[dict[str, Any]]],
                table_summary: dict[str, Any] | None) -> dict[str, float | None]:
    """What a comparison sets side by side: final and best train loss, final eval loss,
    recent tokens/s, peak memory (MB: the largest allocator peak of any rank, else RSS) and
    the wall time, split at the first loss point (`wall_time_split`); a preference job's
    recent reward margin and preference accuracy. None: not measured."""
    losses = [row[LOSS.field] for row in metrics["train"] if row.get(LOSS.field) is not None]
    evals = [row[EVAL_LOSS.field] for row in metrics["eval"]
             if row.get(EVAL_LOSS.field) is not None]
    return {"final_loss": losses[-1] if losses else None,
            "best_loss": min(losses) if losses else None,
            "final_eval_loss": evals[-1] if evals else None,
            "tokens_per_second": _recent_mean(metrics["train"], TOKENS_PER_SECOND.field),
            "peak_mb": (table_summary or {}).get("peak_mb"),
            **wall_time_split(job, metrics["train"]),
            **{figure.field: _recent_mean(metrics["train"], figure.field)
               for figure in RECENT_PREFERENCE_FIGURES}}


def _recent_mean(train: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in train[-RECENT_STEPS:] if row.get(key) is not None]
    return sum(values) / len(values) if values else None


def wall_time_split(job: Job, train: list[dict[str, Any]]) -> dict[str, float | None]:
    """The job's wall time (start to finish, or to now while it runs) in two: "startup_seconds"
    up to its first loss point, "training_seconds" from there on. Start-up holds the one-time
    costs (a download, an op build on a fresh host, a cold page cache) that would blame one
    backend for what the next job of either never pays, so the training part is the one to
    compare. None: not reached (never started; no loss point yet)."""
    if job.started_at is None:
        return {"startup_seconds": None, "training_seconds": None}
    started = as_utc(job.started_at).timestamp()
    ended = (as_utc(job.finished_at) if job.finished_at else utc_now()).timestamp()
    if not train:
        return {"startup_seconds": round(ended - started, 1), "training_seconds": None}
    # The rank stamps its rows with its own clock: never let a skew make a part negative.
    first_point = min(max(train[0]["time"], started), ended)
    return {"startup_seconds": round(first_point - started, 1),
            "training_seconds": round(ended - first_point, 1)}


def job_summary(job: Job) -> dict[str, Any]:
    spec = job.spec_model
    return {"id": job.id, "name": job.name, "status": job.status,
            "backend": spec.backend, "method": spec.method, "objective": spec.objective,
            "max_steps": spec.max_steps, "error": job.error,
            "started_at": _iso(job.started_at), "finished_at": _iso(job.finished_at)}


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def spec_diff(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each dotted field (`backend`, `fsdp.sharding_strategy`) whose value is not the same in
    every spec, with one value a spec (None where a spec lacks the field), sorted by field."""
    flat = [flatten_spec(spec) for spec in specs]
    fields = sorted({field for spec in flat for field in spec})
    diff = []
    for field in fields:
        values = [spec.get(field) for spec in flat]
        if any(value != values[0] for value in values[1:]):
            diff.append({"field": field, "values": values})
    return diff


def flatten_spec(spec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys; lists (e.g. target modules) stay one value."""
    flat: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, dict):
            flat.update(flatten_spec(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def overlaid_series(metrics: dict[int, dict[str, list[dict[str, Any]]]]) -> dict[str, list]:
    """Every job's rows in one list a chart, each row carrying its `job_id`. Memory is the
    accelerator's allocated MB (a CPU rank's RSS where there is none) over seconds since the
    job's first reading, so runs that started at different times line up. A preference
    job's figures (rewards_chosen, reward_margin, ...) a list each, by step, as throughput;
    empty for SFT jobs."""
    loss, throughput = LOSS.field, TOKENS_PER_SECOND.field
    series: dict[str, list] = {loss: [], throughput: [], "memory": [],
                               **{figure.field: [] for figure in PREFERENCE_FIGURES}}
    for job_id, job_metrics in metrics.items():
        series[loss] += _loss_rows(job_id, job_metrics["train"], LOSS.field, "train")
        series[loss] += _loss_rows(job_id, job_metrics["eval"], EVAL_LOSS.field, "eval")
        for key in (throughput, *(figure.field for figure in PREFERENCE_FIGURES)):
            series[key] += [{"job_id": job_id, "step": row["step"], key: row[key]}
                            for row in job_metrics["train"] if row.get(key) is not None]
        series["memory"] += _memory_rows(job_id, job_metrics["memory"])
    return series


def _loss_rows(job_id: int, rows: list[dict[str, Any]], key: str, kind: str) -> list[dict]:
    return [{"job_id": job_id, "step": row["step"], LOSS.field: row[key], "kind": kind}
            for row in rows if row.get("step") is not None and row.get(key) is not None]


def _memory_rows(job_id: int, memory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    readings = [(row["time"], row["rank"], rank_memory_mb(row)) for row in memory]
    readings = [reading for reading in readings if reading[2] is not None]
    start = min((time for time, _rank, _mb in readings), default=0.0)
    return [{"job_id": job_id, "rank": rank, "seconds": round(time - start, 3), "memory_mb": mb}
            for time, rank, mb in readings]
