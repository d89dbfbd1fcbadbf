"""workers (heartbeats); jobs.worker_name, jobs.gpu_indices, jobs.dispatched_at

Revision ID: 0004
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("worker_name", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("gpu_indices", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("dispatched_at")
        batch.drop_column("gpu_indices")
        batch.drop_column("worker_name")
    op.drop_table("workers")
