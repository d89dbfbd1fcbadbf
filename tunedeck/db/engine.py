"""Engines and sessions, built when asked for (never at import time)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


def make_engine(database_url: str) -> Engine:
    if database_url.startswith("sqlite"):
        # A pool as wide as the web's thread pool and a worker's job threads: past the
        # default 5, each busy request opened (and tuned, below) a connection of its own.
        engine = create_engine(database_url, pool_size=20, max_overflow=40,
                               connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", _tune_sqlite_connection)
        return engine
    # Wider than the default 5 for the same reason; a server's connections are processes,
    # so the overflow stays moderate.
    return create_engine(database_url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def _tune_sqlite_connection(dbapi_connection, _record) -> None:
    # WAL lets the web read while the worker writes; foreign keys are off by default.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class Database:
    """An engine and its session factory; the caller owns each transaction."""

    def __init__(self, database_url: str):
        self.url = database_url
        self.engine = make_engine(database_url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work commits on success and rolls back on error."""
        with self._sessions.begin() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
