"""Alembic migrations; `tunedeck migrate` runs them (see tunedeck/db/migrate.py)."""
