"""The Jobs tab's archive, unarchive, delete and "Compare selected" on the jobs ticked in the
table: each action's result or refusal as the message shown. Delete asks first: the first
press only arms the Confirm button, whose label names what will go."""
from __future__ import annotations

from app.actions import job_removal
from app.actions.errors import ActionError
from app.auth.principal import Principal

# One press's work stays bounded: each job is its own action, audit event and folder removal.
MAX_JOBS_AT_ONCE = 50
MIN_JOBS_COMPARED = 2


class NothingToActOn(ValueError):
    """No job is ticked, or more than one press acts on."""


def checked_ids(job_ids: list[int] | None) -> list[int]:
    """The ticked jobs, when a button may act on them; NothingToActOn says why not."""
    if not job_ids:
        raise NothingToActOn("Tick one or more jobs in the table first.")
    if len(job_ids) > MAX_JOBS_AT_ONCE:
        raise NothingToActOn(f"At most {MAX_JOBS_AT_ONCE} jobs at a time: "
                             f"{len(job_ids)} are ticked.")
    return list(job_ids)


def to_compare(job_ids: list[int] | None) -> tuple[list[int] | None, str]:
    """The jobs for the Compare tab (None when too few are ticked), and the message."""
    if len(job_ids or ()) < MIN_JOBS_COMPARED:
        return None, f"Compare selected: tick at least {MIN_JOBS_COMPARED} jobs in the table."
    return list(job_ids), ""


def confirm_label(job_ids: list[int]) -> str:
    """The Confirm button's words for the jobs ticked; raises NothingToActOn."""
    ids = checked_ids(job_ids)
    named = f"job {ids[0]}" if len(ids) == 1 else "jobs " + ", ".join(map(str, ids))
    folders = "its run folder" if len(ids) == 1 else "their run folders"
    return f"Really delete {named} and {folders}?"


def delete_jobs(principal: Principal, job_ids: list[int] | None, *, database, settings,
                client: str | None = None) -> str:
    """One line a job: deleted (and what became of its folder), or why not."""
    try:
        ids = checked_ids(job_ids)
    except NothingToActOn as error:
        return str(error)
    lines = []
    for job_id in ids:
        try:
            deleted = job_removal.delete_job(principal, job_id, database=database,
                                             settings=settings, client=client)
        except ActionError as error:
            lines.append(f"Job {job_id} not deleted: {error}")
        else:
            lines.append(f"Job {job_id} deleted; {deleted.folder_note}.")
    return "\n\n".join(lines)


def archive_jobs(principal: Principal, job_ids: list[int] | None, archived: bool, *, database,
                 client: str | None = None) -> str:
    try:
        ids = checked_ids(job_ids)
    except NothingToActOn as error:
        return str(error)
    word = "archived" if archived else "unarchived"
    lines = []
    for job_id in ids:
        try:
            job_removal.set_archived(principal, job_id, archived, database=database,
                                     client=client)
        except ActionError as error:
            lines.append(f"Job {job_id} not {word}: {error}")
        else:
            lines.append(f"Job {job_id} {word}.")
    return "\n\n".join(lines)
