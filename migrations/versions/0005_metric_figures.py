"""metric_points: the charted figures as Float columns, backfilled from `values`; covering
indexes for the chart's step series and memory lines (replacing ix_metric_points_job_kind_time,
a prefix of the memory one)

Revision ID: 0005
Revises: 0004
"""
from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Written out, not imported from the models: a migration must keep meaning what it meant.
STEP_FIGURES = ("loss", "tokens_per_second", "learning_rate", "grad_norm", "step_seconds",
                "eval_loss")
MEMORY_FIGURES = ("allocated_mb", "rss_mb", "peak_reserved_mb")


def upgrade() -> None:
    with op.batch_alter_table("metric_points") as batch:
        for figure in STEP_FIGURES + MEMORY_FIGURES:
            batch.add_column(sa.Column(figure, sa.Float(), nullable=True))
    _backfill_figures()
    # Both indexes are built after the backfill: one sort of finished rows, not 9 index
    # updates a row.
    op.create_index("ix_metric_points_series_figures", "metric_points",
                    ["job_id", "kind", "rank", "step", "seq", "id", *STEP_FIGURES])
    op.create_index("ix_metric_points_memory_figures", "metric_points",
                    ["job_id", "kind", "time", "rank", "id", *MEMORY_FIGURES])
    op.drop_index("ix_metric_points_job_kind_time", table_name="metric_points")


def _backfill_figures() -> None:
    """One UPDATE for every stored point: each figure that is a JSON number, else NULL
    (a string, a null, a missing key), as `metric_store` fills the columns of new points."""
    if op.get_bind().dialect.name == "postgresql":
        # `values` is json (not jsonb): ->> gives text, cast only when it is a number.
        extract = ("CASE WHEN json_typeof(\"values\" -> '{0}') = 'number' "
                   "THEN (\"values\" ->> '{0}')::double precision END")
    else:
        # json_valid first (CASE, unlike AND, is evaluated in order): an old row holding a
        # bare NaN (not JSON) keeps NULL figures instead of failing the whole migration.
        extract = ("CASE WHEN NOT json_valid(\"values\") THEN NULL "
                   "WHEN json_type(\"values\", '$.{0}') IN ('integer', 'real') "
                   "THEN json_extract(\"values\", '$.{0}') END")
    assignments = ", ".join(f"{figure} = {extract.format(figure)}"
                            for figure in STEP_FIGURES + MEMORY_FIGURES)
    op.execute(f"UPDATE metric_points SET {assignments}")


def downgrade() -> None:
    op.create_index("ix_metric_points_job_kind_time", "metric_points", ["job_id", "kind", "time"])
    op.drop_index("ix_metric_points_memory_figures", table_name="metric_points")
    op.drop_index("ix_metric_points_series_figures", table_name="metric_points")
    with op.batch_alter_table("metric_points") as batch:
        for figure in reversed(STEP_FIGURES + MEMORY_FIGURES):
            batch.drop_column(figure)
