"""The Jobs tab's archive, unarchive and delete: the ids typed in, each action's result or
refusal as the message shown. Delete asks first: the first press only arms the Confirm
button, whose label names what will go."""
from __future__ import annotations

from app.actions import job_removal
from app.actions.errors import ActionError
from app.auth.principal import Principal
from tunedeck.job_store import MAX_JOB_ID

MAX_JOBS_AT_ONCE = 50


class BadIds(ValueError):
    """The "Job ids" box holds something other than job ids."""


def job_ids_of(text: str | None) -> list[int]:
    """The distinct ids in "3, 5 7", in order; BadIds naming the field otherwise."""
    parts = (text or "").replace(",", " ").split()
    if not parts:
        raise BadIds("Job ids: type the id of one or more jobs, e.g. 3, 5")
    if not all(part.isdigit() and 1 <= int(part) <= MAX_JOB_ID for part in parts):
        raise BadIds(f"Job ids: whole numbers from 1 separated by commas, got {text!r}")
    ids = list(dict.fromkeys(int(part) for part in parts))
    if len(ids) > MAX_JOBS_AT_ONCE:
        raise BadIds(f"Job ids: at most {MAX_JOBS_AT_ONCE} jobs at a time")
    return ids


def confirm_label(text: str | None) -> str:
    """The Confirm button's words for the ids typed; raises BadIds."""
    ids = job_ids_of(text)
    named = f"job {ids[0]}" if len(ids) == 1 else "jobs " + ", ".join(map(str, ids))
    folders = "its run folder" if len(ids) == 1 else "their run folders"
    return f"Really delete {named} and {folders}?"


def delete_jobs(principal: Principal, text: str | None, *, database, settings,
                client: str | None = None) -> str:
    """One line a job: deleted (and what became of its folder), or why not."""
    try:
        ids = job_ids_of(text)
    except BadIds as error:
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


def archive_jobs(principal: Principal, text: str | None, archived: bool, *, database,
                 client: str | None = None) -> str:
    try:
        ids = job_ids_of(text)
    except BadIds as error:
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
