"""Job ids as the UI's widgets hand them over (a number box, a table row, the address)."""
from __future__ import annotations

import re
from typing import Any

JOB_PARAMETER = "job"  # `/?job=ID` is the job's page
_LINK = re.compile(r"^\[(\d+)\]\(")


def parse_job_id(value: Any) -> int | None:
    """A job-id box's value as a positive int, or None when empty or not a number."""
    try:
        job_id = int(value)
    except (TypeError, ValueError):
        return None
    return job_id if job_id > 0 else None


def job_link(job_id: int) -> str:
    """A table cell (Markdown) that links the job's own address."""
    return f"[{job_id}](?{JOB_PARAMETER}={job_id})"


def job_id_from_cell(cell: Any) -> int | None:
    """The job id in a table's id cell (a number or a `job_link`), or None."""
    link = _LINK.match(cell) if isinstance(cell, str) else None
    return parse_job_id(link.group(1) if link else cell)
