"""Job ids as the UI's widgets hand them over (a number box, a table row)."""
from __future__ import annotations

from typing import Any


def parse_job_id(value: Any) -> int | None:
    """A job-id box's value as a positive int, or None when empty or not a number."""
    try:
        job_id = int(value)
    except (TypeError, ValueError):
        return None
    return job_id if job_id > 0 else None


def job_id_from_row(row_value: list[Any] | None) -> int | None:
    """The job id in a jobs-table row (its first cell), or None for anything else."""
    return parse_job_id(row_value[0]) if row_value else None
