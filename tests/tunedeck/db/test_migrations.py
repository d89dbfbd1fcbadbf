"""The migrations build exactly the schema the models describe, on SQLite and PostgreSQL."""
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from tunedeck.db.schema import METADATA


def alembic_config(url: str):
    """The project's migrations against `url`, for alembic's command API."""
    from alembic.config import Config

    from tunedeck.db.migrate import MIGRATIONS_DIR

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url)
    return config


@pytest.mark.parametrize("url_fixture", ["sqlite_url",
                                         pytest.param("postgres_url", marks=pytest.mark.postgres)])
def test_migrated_schema_matches_the_models(request, url_fixture):
    from sqlalchemy import create_engine

    engine = create_engine(request.getfixturevalue(url_fixture))
    try:
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), METADATA)
    finally:
        engine.dispose()
    assert differences == []


@pytest.mark.parametrize("url_fixture", ["sqlite_url",
                                         pytest.param("postgres_url", marks=pytest.mark.postgres)])
def test_0005_fills_the_figure_columns_of_points_written_before_it(request, url_fixture):
    from alembic import command
    from sqlalchemy import create_engine, text

    url = request.getfixturevalue(url_fixture)
    config = alembic_config(url)
    command.downgrade(config, "0004")  # also checks that 0005 goes back down
    engine = create_engine(url)
    try:
        with engine.begin() as connection:  # as 0004's code wrote them: JSON only
            connection.execute(text(
                "INSERT INTO jobs (id, name, status, spec, cancel_requested, resume_requested, "
                "attempts, created_at, updated_at) VALUES (1, 'old', 'running', '{}', false, "
                "false, 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
            connection.execute(text(
                'INSERT INTO metric_points (job_id, kind, rank, seq, step, time, "values") '
                "VALUES (1, 'step', 0, 0, 1, 1.0, :step), (1, 'memory', 1, 0, 1, 1.0, :memory)"),
                {"step": '{"loss": 2.5, "grad_norm": null, "learning_rate": 1, '
                         '"tokens_per_second": "fast"}',
                 "memory": '{"allocated_mb": 1000.5, "rss_mb": 900, "device": "cuda:1"}'})
        command.upgrade(config, "head")
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT kind, loss, grad_norm, learning_rate, tokens_per_second, allocated_mb, "
                "rss_mb, peak_reserved_mb FROM metric_points ORDER BY kind")).all()
    finally:
        engine.dispose()
    # Numbers copied (an integer as a float); null, a string and a missing key stay NULL.
    assert [tuple(row) for row in rows] == [
        ("memory", None, None, None, None, 1000.5, 900.0, None),
        ("step", 2.5, None, 1.0, None, None, None, None),
    ]


def test_0009_leaves_jobs_written_before_it_unarchived_and_their_points_in_place(sqlite_url):
    from alembic import command
    from sqlalchemy import create_engine, text

    config = alembic_config(sqlite_url)
    command.downgrade(config, "0008")
    engine = create_engine(sqlite_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO jobs (id, name, status, spec, cancel_requested, resume_requested, "
                "attempts, created_at, updated_at) VALUES (1, 'old', 'succeeded', '{}', false, "
                "false, 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
            connection.execute(text(
                'INSERT INTO metric_points (job_id, kind, rank, seq, step, time, "values") '
                "VALUES (1, 'step', 0, 0, 1, 1.0, '{}')"))
        command.upgrade(config, "head")
        with engine.connect() as connection:
            archived = connection.execute(text("SELECT archived FROM jobs")).scalars().all()
            points = connection.execute(text("SELECT count(*) FROM metric_points")).scalar()
    finally:
        engine.dispose()
    assert (archived, points) == ([False], 1)


def test_0010_goes_down_and_up_again_leaving_jobs_in_place(sqlite_url):
    from alembic import command
    from sqlalchemy import create_engine, inspect, text

    config = alembic_config(sqlite_url)
    command.downgrade(config, "0009")
    engine = create_engine(sqlite_url)
    try:
        assert "presets" not in inspect(engine).get_table_names()
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO jobs (id, name, status, spec, cancel_requested, resume_requested, "
                "attempts, archived, created_at, updated_at) VALUES (1, 'old', 'succeeded', "
                "'{}', false, false, 1, false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
        command.upgrade(config, "head")
        with engine.connect() as connection:
            jobs = connection.execute(text("SELECT count(*) FROM jobs")).scalar()
            presets = connection.execute(text("SELECT count(*) FROM presets")).scalar()
    finally:
        engine.dispose()
    assert (jobs, presets) == (1, 0)
