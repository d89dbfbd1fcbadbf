"""What a failed job's page shows about the failure: the reason, the last log lines of the
rank that failed first, and the "Retry with…" change. Plain data from a job row."""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from app.actions.retry import RetryRefused, planned_retry
from app.views.jobs import job_run_folder
from tunedeck.db.models import Job
from tunedeck.jobs.failure_kinds import failure_label
from tunedeck.jobs.states import FAILED

RANK_LOG_LINES = 30
_TAIL_BYTES = 64 * 1024  # a rank's log can be GBs; the tail is all we show


@dataclass(frozen=True)
class FailureView:
    reason: str = ""  # "out of memory (rank 1)"; empty for a job that has not failed
    rank_log: str = ""  # the last lines of that rank's own output
    retry_label: str = ""  # "Retry with activation checkpointing"; empty when no retry helps
    retry_refusal: str = ""  # why not, e.g. "fix the file first: ..."

    @property
    def retryable(self) -> bool:
        return bool(self.retry_label)


def failure_view(job: Job) -> FailureView:
    if job.status != FAILED:
        return FailureView()
    try:
        change = planned_retry(job)
        retry_label, refusal = f"Retry with {change.label}", ""
    except (RetryRefused, ValueError) as reason:  # ValueError: a stored spec no longer valid
        retry_label, refusal = "", _without_quoted_error(str(reason), job.error)
    return FailureView(reason=failure_label(job.failure_kind or "error", job.failed_rank),
                       rank_log=rank_log_tail(job, job.failed_rank),
                       retry_label=retry_label, retry_refusal=refusal)


def _without_quoted_error(refusal: str, error: str | None) -> str:
    """The refusal quotes the job's error, which the page shows in full just above it: say
    it once ("fix the file first: the error above says what")."""
    if error and refusal.endswith(f": {error}"):
        return refusal[:-len(error)] + "the error above says what"
    return refusal


def rank_log_tail(job: Job, rank: int | None, lines: int = RANK_LOG_LINES) -> str:
    """The rank's stdout then stderr (where tracebacks go), the last `lines` of each."""
    run = job_run_folder(job)
    if run is None or rank is None:
        return ""
    parts = []
    for path in run.rank_log_files(rank):
        tail = _tail_lines(path, lines)
        if tail:
            parts.append(f"--- rank {rank} {path.name} ---\n" + "\n".join(tail))
    return "\n".join(parts)


def _tail_lines(path: Path, lines: int) -> list[str]:
    try:
        with path.open("rb") as file:
            file.seek(0, 2)
            file.seek(max(0, file.tell() - _TAIL_BYTES))
            text = file.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def failure_html(view: FailureView) -> str:
    """HTML, not Markdown: the refusal quotes the error, whose URLs and underscores Markdown
    would turn into links and emphasis (and show an entity escaped for HTML as text)."""
    if not view.reason:
        return ""
    refusal = (f'<p style="margin:4px 0 0">No retry: {html.escape(view.retry_refusal)}</p>'
               if view.retry_refusal else "")
    return (f'<p style="margin:0"><strong>Why it failed:</strong> {html.escape(view.reason)}</p>'
            f"{refusal}")
