"""jobs.archived: a job can be archived, hidden from listings unless asked for

Revision ID: 0009
Revises: 0008
"""
from alembic import op
import sqlalchemy as sa

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain-string default keeps this an ALTER TABLE ADD COLUMN on SQLite too: an SQL
    # expression (sa.false()) makes batch mode rebuild the jobs table, and dropping the old
    # one cascades to every row that references it (metric points, events).
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("archived", sa.Boolean(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("archived")
