"""jobs.claimed_at: when a worker last claimed the job; started_at keeps its first start

Revision ID: 0013
Revises: 0012
"""
from alembic import op
import sqlalchemy as sa

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
    # Until now started_at was overwritten by every claim: it is the last claim.
    op.execute("UPDATE jobs SET claimed_at = started_at")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("claimed_at")
