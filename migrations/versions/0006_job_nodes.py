"""job_nodes (the other nodes of a job on several nodes); jobs.rendezvous

Revision ID: 0006
Revises: 0005
"""
from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("rendezvous", sa.String(length=300), nullable=True))
    op.create_table(
        "job_nodes",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("worker_name", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu_indices", sa.JSON(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "node_rank"),
    )
    op.create_index("ix_job_nodes_worker_name", "job_nodes", ["worker_name"])


def downgrade() -> None:
    op.drop_index("ix_job_nodes_worker_name", table_name="job_nodes")
    op.drop_table("job_nodes")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("rendezvous")
