"""Telling "the database is unreachable" from every other error, and what a service says
while it is.

PostgreSQL stopped or restarting, a connection cut, SQLite's file locked past its busy
timeout or unreadable: the request or handler was fine and will succeed once the database
answers again, so the web answers 503 with Retry-After, the page shows one banner and the
CLI waits. Anything else (a constraint, a bad query) stays the bug it is.
"""
from __future__ import annotations

from sqlalchemy import exc

# What the web's 503 body, the page's banner and the CLI's waiting line say.
DATABASE_UNREACHABLE = "the database is unreachable; retrying"
# Seconds a client is asked to wait before it tries again.
RETRY_AFTER_SECONDS = 5

# SQLite says everything with an OperationalError, a missing column included: only these
# words mean its file cannot be used now (locked past the busy timeout, unreadable, its
# disk full or read-only), whatever the query.
_SQLITE_UNREACHABLE = ("database is locked", "database table is locked",
                       "unable to open database file", "disk I/O error", "file is not a database",
                       "database disk image is malformed", "database or disk is full",
                       "attempt to write a readonly database")


def unreachable_body() -> dict:
    """What the web answers with its 503 (FastAPI's `{"detail": ...}` shape, as every other
    error of the API has)."""
    return {"detail": DATABASE_UNREACHABLE, "retry_after_seconds": RETRY_AFTER_SECONDS}


def is_database_unreachable(error: BaseException | None) -> bool:
    """Whether `error`, or an error it was raised from or while handling, says the
    database could not be reached."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if _says_unreachable(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _says_unreachable(error: BaseException) -> bool:
    import sqlite3

    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, exc.TimeoutError):  # the pool's wait for a free connection
        return True
    if isinstance(error, (exc.OperationalError, exc.InterfaceError)):
        # PostgreSQL's OperationalError is the connection's (a bad query is a
        # ProgrammingError); SQLite's is anything, so its words decide.
        return (_sqlite_says_unreachable(error.orig) if isinstance(error.orig, sqlite3.Error)
                else True)
    if isinstance(error, sqlite3.Error):  # raised by a raw connection, unwrapped
        return _sqlite_says_unreachable(error)
    try:
        import psycopg
    except ImportError:  # a SQLite-only install
        return False
    return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError))


def _sqlite_says_unreachable(error: BaseException) -> bool:
    return str(error).startswith(_SQLITE_UNREACHABLE)


def database_reachable(database) -> bool:
    """One round trip (`SELECT 1`): whether `database` (a tunedeck.db.engine.Database)
    answers now."""
    from sqlalchemy import text

    try:
        with database.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return True
    except Exception as error:  # noqa: BLE001 - anything but unreachable is re-raised
        if is_database_unreachable(error):
            return False
        raise
