"""Every table TuneDeck has: importing this registers each row module on Base.metadata, which
the migrations and the schema test compare against. A new row module is imported here."""
from __future__ import annotations

import tunedeck.db.request_rows  # noqa: F401 - registers its tables
from tunedeck.db.models import Base

METADATA = Base.metadata
