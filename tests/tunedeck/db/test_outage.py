"""Which errors say "the database is unreachable": the real drivers' errors, raised by real
databases that cannot answer, against errors that are bugs or bad input."""
from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from harness.servers import free_port
from tunedeck.db.engine import Database
from tunedeck.db.outage import database_reachable, is_database_unreachable


def _error_of(database: Database) -> BaseException:
    with pytest.raises(Exception) as raised:
        with database.engine.connect() as connection:
            connection.execute(text("SELECT count(*) FROM jobs"))
    return raised.value


def test_a_postgresql_nobody_listens_for_is_unreachable():
    database = Database(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test")
    assert is_database_unreachable(_error_of(database))
    assert database_reachable(database) is False


def test_a_sqlite_file_that_is_no_database_or_cannot_be_opened_is_unreachable(tmp_path):
    garbled = tmp_path / "tunedeck.db"
    garbled.write_bytes(b"not a database" * 100)
    assert is_database_unreachable(_error_of(Database(f"sqlite:///{garbled}")))
    missing_folder = Database(f"sqlite:///{tmp_path / 'no-such-folder' / 'tunedeck.db'}")
    assert is_database_unreachable(_error_of(missing_folder))
    assert database_reachable(missing_folder) is False


def test_a_locked_sqlite_file_is_unreachable(tmp_path, sqlite_url):
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        connection = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), timeout=0.1)
        with pytest.raises(sqlite3.OperationalError) as raised:
            connection.execute("CREATE TABLE held (x)")
        assert "locked" in str(raised.value)
        assert is_database_unreachable(raised.value)
    finally:
        holder.execute("ROLLBACK")


def test_an_error_raised_from_an_unreachable_database_counts_too():
    try:
        try:
            raise sqlite3.OperationalError("unable to open database file")
        except sqlite3.OperationalError as cause:
            raise RuntimeError("could not list the jobs") from cause
    except RuntimeError as error:
        assert is_database_unreachable(error)


def test_bugs_and_bad_input_are_not_an_outage(sqlite_url):
    database = Database(sqlite_url)
    with pytest.raises(Exception) as bad_query:
        with database.engine.connect() as connection:
            connection.execute(text("SELECT no_such_column FROM jobs"))
    # SQLite says a missing column with an OperationalError too: its words tell it apart.
    assert bad_query.type.__name__ == "OperationalError"
    assert not is_database_unreachable(bad_query.value)
    assert not is_database_unreachable(IntegrityError("INSERT", {}, sqlite3.IntegrityError("x")))
    assert not is_database_unreachable(ValueError("a bad spec"))
    assert not is_database_unreachable(KeyError("job"))
    assert database_reachable(database) is True
