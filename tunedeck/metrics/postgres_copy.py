"""Metric points into PostgreSQL by COPY, the cheapest way in for the client and the server
alike (measured: about half the client's CPU a point of the parameter-set INSERT, which at
16,000 points/s took the worker's whole core; bench/ingest.py --ceiling)."""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from tunedeck.db.models import MetricPoint

# The columns COPY fills, in its order (the id is the table's own sequence).
COPY_COLUMNS = tuple(column.name for column in MetricPoint.__table__.columns if column.name != "id")
_VALUES_AT = COPY_COLUMNS.index("values")  # the one JSON column, sent as its text
_QUOTED_COPY_COLUMNS = ", ".join(f'"{name}"' for name in COPY_COLUMNS)  # "values" is a keyword
_COPY_STATEMENT = f"COPY {MetricPoint.__tablename__} ({_QUOTED_COPY_COLUMNS}) FROM STDIN"


def copied_metric_points(session: Session, rows: list[dict[str, Any]]) -> bool:
    """True once `rows` (tunedeck.metrics.store's, keyed by column) are in. COPY has no ON
    CONFLICT: a batch holding a line already stored (one retried after its commit's answer
    was lost) fails as a whole, inside a savepoint so nothing else of the transaction goes
    with it, and False leaves the batch to the caller's INSERT ... ON CONFLICT DO NOTHING.
    Needs psycopg 3 (its COPY API)."""
    from psycopg import errors

    try:
        with session.begin_nested():
            cursor = session.connection().connection.driver_connection.cursor()
            with cursor.copy(_COPY_STATEMENT) as copy:
                for row in rows:
                    cells = [row[name] for name in COPY_COLUMNS]
                    cells[_VALUES_AT] = json.dumps(cells[_VALUES_AT])
                    copy.write_row(cells)
    except errors.UniqueViolation:
        return False
    return True
