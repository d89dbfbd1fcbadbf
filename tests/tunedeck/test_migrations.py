"""The migrations build exactly the schema the models describe, on SQLite and PostgreSQL."""
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from tunedeck.db.models import Base


@pytest.mark.parametrize("url_fixture", ["sqlite_url",
                                         pytest.param("postgres_url", marks=pytest.mark.postgres)])
def test_migrated_schema_matches_the_models(request, url_fixture):
    from sqlalchemy import create_engine

    engine = create_engine(request.getfixturevalue(url_fixture))
    try:
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert differences == []
