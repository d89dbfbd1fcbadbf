"""job_generations: "Try it" requests to a finished job's model and their answers

Revision ID: 0012
Revises: 0011
"""
from alembic import op
import sqlalchemy as sa

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A new table: nothing to batch-alter on SQLite.
    op.create_table(
        "job_generations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=True),
        sa.Column("worker_name", sa.String(length=255), nullable=True),
        sa.Column("answer", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_job_generations_job_id", "job_generations", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_job_generations_job_id", table_name="job_generations")
    op.drop_table("job_generations")
