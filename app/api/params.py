"""The path and query parameters more than one route takes, each checked where FastAPI reads
it so that a bad value is a 422 naming the parameter, never a database error."""
from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from tunedeck.jobs.queries import MAX_JOB_ID

JobId = Annotated[int, Path(ge=1, le=MAX_JOB_ID)]
# A worker request's id (a preflight's, a generation's): ids share the jobs' bound.
RequestId = Annotated[int, Path(ge=1, le=MAX_JOB_ID)]

# A user name to filter by (an audit actor can be a refused sign-in's typed name, so any text
# but NUL): PostgreSQL text refuses a NUL character even as a query parameter.
NO_NUL = r"^[^\x00]*$"


def name_filter(description: str):
    """A query parameter that filters by a user name (at most 64 characters, no NUL)."""
    return Query(None, max_length=64, pattern=NO_NUL, description=description)
