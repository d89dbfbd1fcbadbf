"""Alembic migrations; `tunedeck migrate` runs them (see tunedeck/migrate.py)."""
