"""The Jobs tab's table: one row a job the principal may see, newest first, with a tick box,
its progress, latest figures, peak memory and why it is not running (queued) or failed;
filtered by status, owner and model. The ticks are the browser's own (a list of job ids the
tab keeps); the table only shows them."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.auth.job_access import visible_jobs
from app.auth.principal import Principal
from app.ui.figure_text import first_line, format_number, format_time, step_progress
from app.ui.job_ids import job_id_from_cell, job_link
from app.views.cluster import waiting_reasons
from tunedeck.db.models import Job
from tunedeck.jobs.failure_kinds import failure_label
from tunedeck.jobs.states import FAILED, QUEUED, STATUSES
from tunedeck.metrics import store as metric_store
from tunedeck.metrics.figures import LOSS, TOKENS_PER_SECOND
from tunedeck.settings import Settings

# The tick box first (a bool column draws as checkboxes); units once, in the header; the id
# cell links the job's own page; the reason (what a queued job waits for, why a failed one
# failed) is cut short with the whole of it on hover. The reason is an HTML cell, not a
# Markdown one: it quotes errors, and Markdown links their URLs with its escapes inside.
TICK = "✓"
OWNER = "owner"
JOBS_TABLE_COLUMNS = [TICK, "id", "name", "status", "progress", "loss", "tokens/s", "peak MB",
                      "model", "method · backend", OWNER, "created", "reason"]
TICK_COLUMN = JOBS_TABLE_COLUMNS.index(TICK)
ID_COLUMN = JOBS_TABLE_COLUMNS.index("id")
COLUMN_TYPES = {**{column: "str" for column in JOBS_TABLE_COLUMNS},
                TICK: "bool", "id": "markdown", "reason": "html"}
# Each header on one line at 1440 px (the browser test measures it), the rest to the name,
# model and reason. The owner column only for an admin, who sees everyone's jobs: anyone
# else sees only their own, and under open access nobody owns a job.
COLUMN_WIDTHS = dict(zip(JOBS_TABLE_COLUMNS, (3, 3, 11, 8, 8, 6, 7, 7, 10, 13, 0, 9, 15)))
COLUMN_WIDTHS_WITH_OWNER = dict(zip(JOBS_TABLE_COLUMNS,
                                    (3, 3, 11, 8, 7, 6, 7, 7, 9, 13, 7, 7, 12)))
REASON_CHARS = 72  # at most four lines of its column; the whole on hover
JOBS_TABLE_LIMIT = 100
ANY = "any"
STATUS_CHOICES = [ANY, *STATUSES]
DEFAULT_WORKER_LOST_SECONDS = Settings.model_fields["worker_lost_seconds"].default


@dataclass(frozen=True)
class JobsFilter:
    """What the table shows: a status, an owner (an admin's choice), a model (any part of
    its name or path, any case). None or "any": every value."""

    status: str | None = None
    owner: str | None = None
    model: str | None = None
    # The archived jobs instead of the others.
    archived: bool = False

    @classmethod
    def of(cls, status: Any = None, owner: Any = None, model: Any = None,
           archived: Any = False) -> "JobsFilter":
        def chosen(value: Any) -> str | None:
            text = str(value).strip() if value is not None else ""
            return None if text in ("", ANY) else text
        return cls(chosen(status), chosen(owner), chosen(model), bool(archived))


def jobs_table(*, database, principal: Principal, shown: JobsFilter = JobsFilter(),
               worker_lost_seconds: float = DEFAULT_WORKER_LOST_SECONDS,
               limit: int = JOBS_TABLE_LIMIT) -> pd.DataFrame:
    with database.transaction() as session:
        jobs = visible_jobs(session=session, principal=principal, limit=limit,
                            status=shown.status, owner=shown.owner, model_contains=shown.model,
                            archived=shown.archived)
        ids = [job.id for job in jobs]
        # One query each for the whole table, not one a job: it refreshes every 2 s.
        summaries = metric_store.job_table_summaries(session=session, job_ids=ids)
        waiting = waiting_reasons(session=session, jobs=jobs,
                                  worker_lost_seconds=worker_lost_seconds)
        rows = [_job_row(job, summaries.get(job.id), waiting.get(job.id)) for job in jobs]
    table = pd.DataFrame(rows, columns=JOBS_TABLE_COLUMNS)
    return table if shows_owners(principal) else table.drop(columns=[OWNER])


def shows_owners(principal: Principal) -> bool:
    return principal.is_admin and not principal.open_access


def empty_jobs_table() -> pd.DataFrame:
    return pd.DataFrame([], columns=JOBS_TABLE_COLUMNS)


def table_layout(table: pd.DataFrame) -> dict[str, list[str]]:
    """The Dataframe's datatype and column_widths for the columns `table` has."""
    widths = COLUMN_WIDTHS_WITH_OWNER if OWNER in table.columns else COLUMN_WIDTHS
    return {"datatype": [COLUMN_TYPES[column] for column in table.columns],
            "column_widths": [f"{widths[column]}%" for column in table.columns]}


def row_job_id(row: list[Any] | None) -> int | None:
    """The job a table row (as a select event hands it over) is about, or None."""
    return job_id_from_cell(row[ID_COLUMN]) if row and len(row) > ID_COLUMN else None


def listed_job_ids(table: pd.DataFrame | None) -> list[int]:
    """The jobs the table lists, top to bottom."""
    if table is None or "id" not in table:
        return []
    return [job_id for job_id in map(job_id_from_cell, table["id"]) if job_id is not None]


def with_ticks(table: pd.DataFrame, ticked: list[int]) -> pd.DataFrame:
    """The table with its tick box set on each listed job in `ticked`, cleared on the rest."""
    ticks = set(ticked)
    marked = table.copy()
    marked[TICK] = [job_id in ticks for job_id in map(job_id_from_cell, table["id"])]
    return marked


def toggled(ticked: list[int], job_id: int) -> list[int]:
    """`ticked` with `job_id` unticked when it was ticked, else ticked last."""
    return [other for other in ticked if other != job_id] if job_id in ticked \
        else [*ticked, job_id]


def ticked_jobs(table: pd.DataFrame | None, ticked: list[int]) -> list[int]:
    """What the buttons act on: the ticked jobs the table lists now, in the order ticked. A
    tick on a job a filter hides stays (it shows again with the job) but is not acted on."""
    listed = set(listed_job_ids(table))
    return [job_id for job_id in ticked if job_id in listed]


def filter_choices(*, database, principal: Principal) -> tuple[list[str], list[str]]:
    """The owners and models of the jobs the principal sees, for the filters' lists."""
    with database.transaction() as session:
        jobs = visible_jobs(session=session, principal=principal, limit=JOBS_TABLE_LIMIT * 5)
    owners = sorted({job.owner for job in jobs if job.owner})
    models = sorted({job.spec_model.model for job in jobs})
    return [ANY, *owners], [ANY, *models]


def _job_row(job: Job, latest_step: dict[str, Any] | None, waiting: str | None) -> list[Any]:
    latest_step = latest_step or {}
    spec = job.spec_model
    return [
        False, job_link(job.id), name_with_tags(job.name, spec.tags), job.status,
        _progress(latest_step.get("step"), spec.max_steps),
        format_number(latest_step.get(LOSS.field), "{:.4f}"),
        format_number(latest_step.get(TOKENS_PER_SECOND.field), "{:,.0f}"),
        format_number(latest_step.get("peak_mb"), "{:,.0f}"),
        spec.model, f"{spec.training_words} · {spec.backend}", job.owner or "",
        format_time(job.created_at), hover_cell(_reason(job, waiting)),
    ]


def name_with_tags(name: str, tags: list[str]) -> str:
    """The name cell: the job's name, then its tags as #tag ("run-7 #baseline #qwen")."""
    return " ".join([name, *(f"#{tag}" for tag in tags)])


def _progress(step: int | None, max_steps: int | None) -> str:
    text = step_progress(step, max_steps)
    return f"{text} ({100 * (step or 0) // max_steps}%)" if max_steps else text


def _reason(job: Job, waiting: str | None) -> str:
    if job.status == FAILED:
        label, error = failure_label(job.failure_kind, job.failed_rank), first_line(job.error)
        return f"{label}: {error}" if error else label
    return waiting or "" if job.status == QUEUED else ""


def hover_cell(text: str, limit: int = REASON_CHARS) -> str:
    """An HTML cell showing `text` as plain text (nothing in it is markup), cut at `limit`
    characters with the whole of it as the hover title."""
    if not text:
        return ""
    shown = text if len(text) <= limit else text[:limit - 1] + "…"
    return f'<span title="{html.escape(text)}">{html.escape(shown, quote=False)}</span>'

