"""jobs.failure_kind and jobs.failed_rank; job_samples (GPU and process samples)

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("failure_kind", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("failed_rank", sa.Integer(), nullable=True))
    op.create_table(
        "job_samples",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_job_samples_job_time", "job_samples", ["job_id", "time"])


def downgrade() -> None:
    op.drop_index("ix_job_samples_job_time", table_name="job_samples")
    op.drop_table("job_samples")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("failed_rank")
        batch.drop_column("failure_kind")
