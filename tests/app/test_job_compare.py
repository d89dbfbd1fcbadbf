"""Comparing jobs and "Compare backends", through the handlers: a real SQLite database,
metric points seeded through the store, and a broker that only records what it is sent."""
from __future__ import annotations

import pytest

from app.actions.compare_backends import ComparisonRefused, backend_variants
from app.auth.principal import OPEN_PRINCIPAL
from app.ui.compare import compare_handlers
from app.ui.job_page import job_actions
from app.views.job_compare import BadJobIds, compare_jobs, parse_job_ids, spec_diff
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import store as metric_store


class RecordingCelery:
    def __init__(self):
        self.sent: list[tuple[str, list]] = []

    def send_task(self, name, args=None, **options):
        self.sent.append((name, list(args or [])))


def create_job(database: Database, **spec_fields) -> int:
    spec = JobSpec(**{"max_steps": 20, "num_gpus": 2, **spec_fields})
    with database.transaction() as session:
        return job_store.create_job(session=session, spec=spec).id


def preference_figures(step: int) -> dict[str, float]:
    """A DPO step's own figures (tunedeck.metrics.events.PREFERENCE_FIELDS)."""
    return {"rewards_chosen": 0.1 * step, "rewards_rejected": -0.1 * step,
            "reward_margin": 0.2 * step, "reward_accuracy": 0.25 * step,
            "logps_chosen": -40.0 + step, "logps_rejected": -50.0 - step}


def seed_points(database: Database, job_id: int, *, steps: int, start_time: float,
                preference: bool = False) -> None:
    events = []
    for step in range(1, steps + 1):
        time = start_time + step
        events.append({"kind": "step", "rank": 0, "time": time, "step": step,
                       "loss": 3.0 / step, "tokens_per_second": 100.0 * job_id,
                       **(preference_figures(step) if preference else {})})
        events += [{"kind": "memory", "rank": rank, "time": time, "rss_mb": 500.0 + rank}
                   for rank in (0, 1)]
    events.append({"kind": "eval", "rank": 0, "time": start_time + steps, "step": steps,
                   "eval_loss": 1.5})
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id,
                                       events=list(enumerate(events)))


@pytest.mark.parametrize("text, ids", [("3, 5, 8", [3, 5, 8]), ("1,2", [1, 2]),
                                       ("4 2 4", [4, 2])])
def test_job_ids_parse_in_order_without_repeats(text, ids):
    assert parse_job_ids(text) == ids


@pytest.mark.parametrize("text", ["", "1", "1,1", "1,x", "0,2", "1.5,2"])
def test_fewer_than_two_ids_or_a_bad_list_is_refused(text):
    with pytest.raises(BadJobIds):
        parse_job_ids(text)


def test_spec_diff_lists_only_the_dotted_fields_that_differ():
    zero2 = JobSpec(max_steps=5).model_dump(mode="json")
    fsdp = JobSpec(max_steps=5, backend="fsdp",
                   fsdp={"sharding_strategy": "shard_grad_op"}).model_dump(mode="json")
    assert spec_diff([zero2, fsdp, zero2]) == [
        {"field": "backend", "values": ["zero2", "fsdp", "zero2"]},
        {"field": "fsdp.sharding_strategy", "values": ["full_shard", "shard_grad_op", "full_shard"]},
    ]
    assert spec_diff([zero2, zero2]) == []


def test_compare_overlays_each_jobs_series_keyed_by_job(database):
    first, second = create_job(database), create_job(database, backend="fsdp", learning_rate=1e-3)
    seed_points(database, first, steps=5, start_time=1000.0)
    seed_points(database, second, steps=3, start_time=5000.0)
    compared = compare_jobs(database=database, job_ids=[second, first])
    assert [job["id"] for job in compared["jobs"]] == [second, first]
    assert {entry["field"]: entry["values"] for entry in compared["diff"]} == {
        "backend": ["fsdp", "zero2"], "learning_rate": [1e-3, 2e-4]}
    train = [(row["job_id"], row["step"]) for row in compared["series"]["loss"]
             if row["kind"] == "train"]
    assert train == [(second, step) for step in (1, 2, 3)] + [(first, step) for step in range(1, 6)]
    assert {(row["job_id"], row["loss"]) for row in compared["series"]["loss"]
            if row["kind"] == "eval"} == {(first, 1.5), (second, 1.5)}
    assert {row["tokens_per_second"] for row in compared["series"]["tokens_per_second"]
            if row["job_id"] == second} == {100.0 * second}
    memory = [row for row in compared["series"]["memory"] if row["job_id"] == second]
    # Seconds since each job's own first reading, so runs started at different times line up.
    assert min(row["seconds"] for row in memory) == 0.0 and {row["rank"] for row in memory} == {0, 1}


def test_compare_downsamples_each_line(database):
    first, second = create_job(database), create_job(database)
    seed_points(database, first, steps=300, start_time=0.0)
    seed_points(database, second, steps=3, start_time=0.0)
    compared = compare_jobs(database=database, job_ids=[first, second], max_points=20)
    first_rows = [row for row in compared["series"]["loss"]
                  if row["job_id"] == first and row["kind"] == "train"]
    assert len(first_rows) <= 20 and first_rows[-1]["step"] == 300


def test_compare_names_a_missing_job(database):
    first = create_job(database)
    with pytest.raises(job_queries.JobNotFound, match="job 99"):
        compare_jobs(database=database, job_ids=[first, 99])


def test_compare_tab_frames_are_coloured_by_job_and_refresh_while_one_runs(database):
    first, second = create_job(database), create_job(database, backend="fsdp")
    seed_points(database, first, steps=4, start_time=0.0)
    comparison = compare_handlers.load_comparison(f"{first}, {second}", database=database, principal=OPEN_PRINCIPAL)
    assert comparison.running  # both are queued
    assert set(comparison.loss["job"]) == {f"job {first} (zero2)", f"job {first} (zero2) eval"}
    assert list(comparison.throughput.columns) == ["step", "tokens_per_second", "job"]
    assert set(comparison.memory["job"]) == {f"job {first} (zero2) rank 0",
                                             f"job {first} (zero2) rank 1"}
    assert comparison.diff.values.tolist() == [["backend", "zero2", "fsdp"]]
    assert "Cannot compare" in compare_handlers.load_comparison("7", database=database, principal=OPEN_PRINCIPAL).message
    assert "job 99 does not exist" in compare_handlers.load_comparison(
        f"{first}, 99", database=database, principal=OPEN_PRINCIPAL).message
    empty = compare_handlers.load_comparison("", database=database, principal=OPEN_PRINCIPAL)
    assert empty.message == compare_handlers.NO_COMPARISON and not empty.running
    assert empty.loss["step"].dtype == "float64"
    assert not empty.shown  # the tables are hidden; the message says what to do


def test_every_line_of_a_job_has_the_jobs_colour_on_every_chart(database):
    first, second = create_job(database), create_job(database, backend="fsdp", eval_split=0.1,
                                                      eval_every_steps=2)
    comparison = compare_handlers.load_comparison(f"{first}, {second}", database=database,
                                                  principal=OPEN_PRINCIPAL)
    colours = comparison.colours
    one, two = f"job {first} (zero2)", f"job {second} (fsdp)"
    assert colours[one] == colours[f"{one} rank 0"] == colours[f"{one} rank 1"] == "#1f77b4"
    assert colours[two] == colours[f"{two} rank 1"] == "#ff7f0e"
    assert colours[f"{two} eval"] not in (colours[one], colours[two])  # a tint of its job's
    every_line = {line for lines in comparison.lines.values() for line in lines}
    assert every_line == set(colours)


def test_the_summary_sets_each_jobs_figures_side_by_side(database):
    first, second = create_job(database), create_job(database, backend="fsdp")
    seed_points(database, first, steps=4, start_time=0.0)
    seed_points(database, second, steps=2, start_time=0.0)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=first, run_dir="/r", worker_host="h")
    comparison = compare_handlers.load_comparison(f"{first}, {second}", database=database,
                                                  principal=OPEN_PRINCIPAL)
    rows = {row[0]: row[1:] for row in comparison.summary.values.tolist()}
    assert rows["final loss"] == ["0.7500", "1.5000"] and rows["best loss"] == ["0.7500", "1.5000"]
    assert rows["final eval loss"] == ["1.5000", "1.5000"]
    assert rows["tokens/s (last 20 steps)"] == [f"{100 * first:,}", f"{100 * second:,}"]
    assert rows["peak memory (MB)"] == ["501", "501"]
    assert rows["start-up (to the first loss)"][0].endswith("s")
    assert rows["wall time from the first loss"][1] == ""  # never started
    assert list(comparison.summary.columns) == ["figure", f"job {first} (zero2)",
                                                f"job {second} (fsdp)"]
    picked = compare_handlers.pickable_jobs(database=database, principal=OPEN_PRINCIPAL)
    assert [job_id for _label, job_id in picked] == [second, first]


def test_wall_time_is_compared_from_the_first_loss_with_start_up_apart(database):
    """A fresh host's first ZeRO-2 job once spent two minutes building a DeepSpeed op
    before step 1: a one-time cost the wall time must not blame the backend for."""
    from datetime import timedelta

    from tunedeck.db.models import Job, utc_now

    slow_start, quick_start = create_job(database), create_job(database, backend="fsdp")
    finished = utc_now()
    for job_id, startup_seconds in ((slow_start, 118), (quick_start, 3)):
        started = finished - timedelta(seconds=startup_seconds + 5)
        # Steps 1-4 stamped one second apart from the first loss point on.
        seed_points(database, job_id, steps=4,
                    start_time=started.timestamp() + startup_seconds - 1)
        with database.transaction() as session:
            job_store.mark_job_running(session=session, job_id=job_id, run_dir="/r",
                                       worker_host="h")
            job_store.mark_job_succeeded(session=session, job_id=job_id)
            job = session.get(Job, job_id)  # the clock of a run that took this long
            job.started_at, job.finished_at = started, finished
    figures = [job["figures"] for job in compare_jobs(
        database=database, job_ids=[slow_start, quick_start])["jobs"]]
    assert [(f["startup_seconds"], f["training_seconds"]) for f in figures] == [(118, 5), (3, 5)]
    comparison = compare_handlers.load_comparison(f"{slow_start}, {quick_start}",
                                                  database=database, principal=OPEN_PRINCIPAL)
    rows = {row[0]: row[1:] for row in comparison.summary.values.tolist()}
    assert rows["wall time from the first loss"] == ["5s", "5s"]
    assert rows["start-up (to the first loss)"] == ["1m 58s", "3s"]
    assert "wall time" not in rows


def test_backend_variants_differ_only_in_backend_name_and_budget():
    spec = JobSpec(name="base", max_steps=500, checkpoint_every_steps=10, learning_rate=1e-3)
    zero2, fsdp = backend_variants(spec)
    assert (zero2.backend, fsdp.backend) == ("zero2", "fsdp")
    assert (zero2.name, fsdp.name) == ("base (zero2)", "base (fsdp)")
    assert zero2.max_steps == fsdp.max_steps == 50
    assert zero2.checkpoint_every_steps == fsdp.checkpoint_every_steps == 0
    assert spec_diff([zero2.model_dump(), fsdp.model_dump()]) == [
        {"field": "backend", "values": ["zero2", "fsdp"]},
        {"field": "name", "values": ["base (zero2)", "base (fsdp)"]}]
    assert backend_variants(JobSpec(epochs=2), max_steps=7)[0].max_steps == 7
    assert backend_variants(JobSpec(max_steps=6))[1].max_steps == 6
    with pytest.raises(ComparisonRefused, match="qlora"):
        backend_variants(JobSpec(max_steps=5, method="qlora"))


def test_compare_backends_button_starts_two_jobs_and_names_them(database):
    source = create_job(database, name="src")
    celery = RecordingCelery()
    message, ids = job_actions.compare_backends_from_page(source, database=database,
                                                          celery_app=celery,
                                                          principal=OPEN_PRINCIPAL)
    first, second = (int(part) for part in ids.split(","))
    assert message == (f"Started jobs {first} and {second}; open Compare with ids "
                       f"{first},{second}")
    assert [args for _name, args in celery.sent] == [[first], [second]]
    with database.transaction() as session:
        events = [event.message for event in job_queries.list_job_events(session=session,
                                                                        job_id=source)]
    assert f"compared backends: jobs {first} and {second}" in events
    refused, no_ids = job_actions.compare_backends_from_page(
        create_job(database, method="qlora"), database=database, celery_app=celery,
        principal=OPEN_PRINCIPAL)
    assert refused.startswith("Not compared: qlora") and no_ids is None
    assert job_actions.compare_backends_from_page(
        None, database=database, celery_app=celery,
        principal=OPEN_PRINCIPAL) == ("Pick a job first.", None)


def test_identical_curves_are_named_above_the_charts(database):
    first, second, third = (create_job(database), create_job(database, backend="fsdp"),
                            create_job(database))
    for job_id, steps in ((first, 4), (second, 4), (third, 3)):
        seed_points(database, job_id, steps=steps, start_time=0.0)
    same = compare_handlers.load_comparison(f"{first}, {second}", database=database,
                                            principal=OPEN_PRINCIPAL)
    one, two = f"job {first} (zero2)", f"job {second} (fsdp)"
    assert compare_handlers.identical_lines(same.loss, "loss") == [[one, two],
                                                                   [f"{one} eval", f"{two} eval"]]
    assert f"**Identical loss curves:** {one} and {two} have the same loss" in same.message
    assert f"(in {two}'s colour)" in same.message
    # The same first steps but one more: not identical, no note.
    other = compare_handlers.load_comparison(f"{first}, {third}", database=database,
                                             principal=OPEN_PRINCIPAL)
    assert "Identical" not in other.message


def test_a_dpo_jobs_preference_figures_are_overlaid_and_an_sft_comparison_has_none(database):
    from tunedeck.metrics.figures import PREFERENCE_CHARTS

    dpo = create_job(database, objective="dpo", dataset="builtin:arithmetic-preference")
    sft, other_sft = create_job(database, backend="fsdp"), create_job(database)
    seed_points(database, dpo, steps=4, start_time=0.0, preference=True)
    seed_points(database, sft, steps=4, start_time=0.0)
    compared = compare_jobs(database=database, job_ids=[dpo, sft])
    # The API's series: a list a figure, each row naming its job; none of the SFT job's.
    assert compared["series"]["reward_margin"] == [
        {"job_id": dpo, "step": step, "reward_margin": pytest.approx(0.2 * step)}
        for step in range(1, 5)]
    assert {row["job_id"] for row in compared["series"]["logps_rejected"]} == {dpo}
    comparison = compare_handlers.load_comparison(f"{dpo}, {sft}", database=database,
                                                  principal=OPEN_PRINCIPAL)
    label = f"job {dpo} (dpo · zero2)"  # never the same label as an SFT job's
    assert comparison.lines["rewards"] == [f"{label} chosen", f"{label} rejected"]
    assert comparison.lines["reward_margin"] == comparison.lines["reward_accuracy"] == [label]
    rewards = comparison.preference["rewards"]
    assert list(rewards.columns) == ["step", "value", "job"]
    assert rewards[rewards["job"] == f"{label} rejected"]["value"].tolist() == pytest.approx(
        [-0.1, -0.2, -0.3, -0.4])
    # Chosen in the job's colour (as its loss line), rejected a lighter tint of it.
    colours = comparison.colours
    assert colours[f"{label} chosen"] == colours[label]
    assert colours[f"{label} rejected"] not in (colours[label], colours[f"job {sft} (fsdp)"])
    rows = {row[0]: row[1:] for row in comparison.summary.values.tolist()}
    assert rows["reward margin (last 20 steps)"] == ["0.5000", ""]  # mean of 0.2 .. 0.8
    assert rows["preference accuracy (last 20 steps)"] == ["62.5%", ""]
    # Two SFT jobs: no preference chart, no preference row.
    plain = compare_handlers.load_comparison(f"{sft}, {other_sft}", database=database,
                                             principal=OPEN_PRINCIPAL)
    assert not any(plain.lines[chart.name] for chart in PREFERENCE_CHARTS)
    assert not any(row[0].startswith(("reward", "preference"))
                   for row in plain.summary.values.tolist())
    # A DPO job before its first step already has its lines (coloured, in the legend).
    queued = create_job(database, objective="dpo", dataset="builtin:arithmetic-preference")
    early = compare_handlers.load_comparison(f"{sft}, {queued}", database=database,
                                             principal=OPEN_PRINCIPAL)
    assert early.lines["logps"] == [f"job {queued} (dpo · zero2) chosen",
                                    f"job {queued} (dpo · zero2) rejected"]


def test_each_jobs_lines_have_its_dash_pattern_on_every_compare_chart():
    css = compare_handlers.line_dash_css()
    first, second = compare_handlers.JOB_COLOURS[:2]
    assert f'#compare-loss-plot g.mark-line path[stroke="{first}"]' in css
    assert f'#compare-memory-plot g.mark-line path[stroke="{second}"]' in css
    assert f'#compare-rewards-plot g.mark-line path[stroke="{second}"]' in css
    assert f'#compare-reward-accuracy-plot g.mark-line path[stroke="{first}"]' in css
    rules = css.splitlines()
    assert rules[0].endswith("{ stroke-dasharray: none; }")  # the first job solid
    assert rules[1].endswith("{ stroke-dasharray: 9 5; }")
    assert len(rules) == len(compare_handlers.JOB_COLOURS)


def test_a_grpo_jobs_rl_figures_are_overlaid_beside_a_dpo_jobs(database):
    from tunedeck.metrics.figures import PREFERENCE_CHARTS, RL_CHARTS

    grpo = create_job(database, objective="grpo", dataset="builtin:arithmetic-rl",
                      micro_batch_size=8, seq_len=512)
    dpo = create_job(database, objective="dpo", dataset="builtin:arithmetic-preference")
    events = [(index, {"kind": "step", "rank": 0, "time": float(step), "step": step,
                       "loss": 0.01, "tokens_per_second": 100.0, "reward": 0.25 * step,
                       "reward_means": {"contains": 0.25 * step}, "completion_length": 5.0,
                       "completion_length_min": 2.0, "completion_length_max": 8.0,
                       "clip_ratio_low": 0.0, "clip_ratio_high": 0.0,
                       "sampling_seconds": 0.2, "scoring_seconds": 0.01,
                       "training_seconds": 0.1})
              for index, step in enumerate(range(1, 5))]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=grpo, events=events)
    seed_points(database, dpo, steps=4, start_time=0.0, preference=True)
    comparison = compare_handlers.load_comparison(f"{grpo}, {dpo}", database=database,
                                                  principal=OPEN_PRINCIPAL)
    label = f"job {grpo} (grpo · zero2)"
    assert comparison.lines["reward"] == [label]  # one line a job: the job's own name
    assert comparison.lines["completion_length"] == [f"{label} mean", f"{label} min",
                                                     f"{label} max"]
    assert comparison.lines["kl"] == []  # beta 0: no reference, no KL chart
    assert all(f"job {dpo}" not in line for chart in RL_CHARTS
               for line in comparison.lines[chart.name])
    assert all(label not in line for chart in PREFERENCE_CHARTS
               for line in comparison.lines[chart.name])
    rows = {row[0]: row[1:] for row in comparison.summary.values.tolist()}
    assert rows["mean reward (last 20 steps)"] == ["0.6250", ""]  # mean of 0.25 .. 1.0
