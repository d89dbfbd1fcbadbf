"""The table of charted figures agrees with the event schema, the samples, the ORM columns
and the store; and the units module is pure."""
import ast
from pathlib import Path

from tunedeck.db.models import MetricPoint
from tunedeck.metrics import events, figures, samples, store as metric_store

REPO = Path(__file__).resolve().parents[3]
EVENT_FIELDS = {events.STEP: events.STEP_FIELDS, events.MEMORY: events.MEMORY_FIELDS,
                events.EVAL: events.EVAL_FIELDS}
# What metric_points held before the table (migration 0005): the schema must not move.
COLUMNS_OF_0005 = ("loss", "tokens_per_second", "learning_rate", "grad_norm", "step_seconds",
                   "eval_loss", "allocated_mb", "rss_mb", "peak_reserved_mb")


def test_every_figure_is_a_field_of_the_event_or_sample_that_carries_it():
    fields_of = {**EVENT_FIELDS, **samples.FIELDS}
    for figure in figures.FIGURES:
        assert figure.field in fields_of[figure.kind], figure


def test_each_figure_is_declared_once_a_kind():
    keys = [(figure.kind, figure.field) for figure in figures.FIGURES]
    assert len(keys) == len(set(keys))


def test_the_figure_columns_are_the_orm_float_columns_of_metric_points():
    columns = MetricPoint.__table__.c
    float_columns = {column.name for column in columns
                     if column.name not in {"id", "job_id", "kind", "rank", "seq", "step", "time",
                                            "values"}}
    assert set(figures.FIGURE_COLUMNS) == float_columns
    assert figures.FIGURE_COLUMNS == COLUMNS_OF_0005
    assert all(columns[name].nullable and columns[name].type.python_type is float
               for name in figures.FIGURE_COLUMNS)


def test_only_event_figures_have_columns():
    for figure in figures.FIGURES:
        if figure.column is not None:
            assert figure.kind in EVENT_FIELDS and figure.column == figure.field, figure


def test_the_store_and_the_samples_chart_the_tables_figures():
    assert metric_store.TRAIN_CHART_COLUMNS == ("loss", "tokens_per_second", "learning_rate",
                                                "grad_norm", "step_seconds")
    assert metric_store.EVAL_CHART_COLUMNS == ("eval_loss",)
    assert metric_store.MEMORY_CHART_COLUMNS == ("allocated_mb", "rss_mb", "peak_reserved_mb")
    assert samples.CHARTED_FIELDS == {samples.GPU: ("used_mb", "utilization_percent"),
                                      samples.PROCESS: ("rss_mb", "cpu_percent")}
    assert set(metric_store.chart_figure_columns({})) == set(figures.FIGURE_COLUMNS)


def test_the_live_panel_draws_lr_grad_norm_step_time_and_mfu():
    assert [figure.field for figure in figures.LIVE_STEP_FIGURES] == [
        "learning_rate", "grad_norm", "step_seconds", "mfu"]


def test_the_preference_charts_draw_each_dpo_step_figure_once_with_no_column():
    """No migration: the preference figures are read from the row's JSON, as MFU is."""
    charted = [figure.field for chart in figures.PREFERENCE_CHARTS for figure in chart.figures]
    assert charted == list(events.PREFERENCE_FIELDS)
    assert set(events.PREFERENCE_FIELDS) <= set(events.STEP_FIELDS)
    # Every RL figure the trainer sends is declared (a chart draws most: clipped_ratio and
    # entropy are rows of the API and the trackers only).
    declared = {figure.field for figure in figures.FIGURES if figure.kind == events.STEP}
    charted_rl = {figure.field for chart in figures.RL_CHARTS
                  for figure in (*chart.figures, *([chart.keyed] if chart.keyed else []))}
    assert charted_rl <= declared and charted_rl <= set(events.RL_FIELDS)
    assert set(events.RL_FIELDS) - charted_rl == {"reward_std", "frac_reward_zero_std",
                                                  "entropy", "clipped_ratio"}
    for chart in figures.PREFERENCE_CHARTS:
        assert all(figure in figures.FIGURES and figure.kind == events.STEP
                   and figure.column is None and not figure.live_chart
                   for figure in chart.figures), chart
    assert [(chart.title, [name for name, _figure in chart.lines])
            for chart in figures.PREFERENCE_CHARTS] == [
        ("Rewards", ["chosen", "rejected"]), ("Reward margin", ["margin"]),
        ("Preference accuracy", ["accuracy"]), ("Log-probs", ["chosen", "rejected"])]


def test_a_ranks_memory_is_its_allocated_memory_else_its_rss():
    assert figures.rank_memory_mb({"allocated_mb": 10.0, "rss_mb": 3.0}) == 10.0
    assert figures.rank_memory_mb({"allocated_mb": None, "rss_mb": 3.0}) == 3.0
    assert figures.rank_memory_mb({}) is None


def test_figures_and_units_import_nothing_heavy():
    """The trainer imports both: only the standard library and the event schema."""
    allowed = {"__future__", "dataclasses", "typing", "math", "tunedeck.metrics.events"}
    for module in ("tunedeck/metrics/figures.py", "tunedeck/units.py"):
        tree = ast.parse((REPO / module).read_text())
        imported = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in tree.body if isinstance(node, ast.Import)
                     for alias in node.names}
        assert imported <= allowed, (module, imported - allowed)
