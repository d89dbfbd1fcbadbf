"""Alembic environment: the URL comes from TuneDeck's settings unless the caller set one."""
from __future__ import annotations

from alembic import context

from tunedeck.db.engine import make_engine
from tunedeck.db.schema import METADATA
from tunedeck.settings import load_settings

config = context.config
database_url = config.get_main_option("sqlalchemy.url") or load_settings().resolved_database_url


def run_migrations_offline() -> None:
    context.configure(url=database_url, target_metadata=METADATA, literal_binds=True,
                      render_as_batch=database_url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(database_url)
    with engine.connect() as connection:
        # SQLite can't ALTER most things; batch mode rebuilds tables instead.
        context.configure(connection=connection, target_metadata=METADATA,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
