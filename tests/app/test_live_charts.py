"""The job page's live signals and the jobs table's figures, as handlers of plain values
(and, for the table, a real SQLite database)."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.jobs import jobs_table
from app.ui.job_ids import job_id_from_cell
from app.ui.job_page import live_charts
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import store as metric_store

SPEC = JobSpec(model="builtin:tiny-llama", method="lora", backend="zero2", num_gpus=2,
               max_steps=100)
START = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def _steps(count, step_seconds=0.5):
    return [{"step": step, "time": 1000.0 + step * step_seconds, "loss": 3.0 - step / 100,
             "learning_rate": 1e-4 * step, "grad_norm": 1.5, "step_seconds": step_seconds,
             "tokens_per_second": 900.0} for step in range(1, count + 1)]


def _gpu(time, gpu, used_mb):
    return {"time": time, "host": "node-a", "gpu": gpu, "used_mb": used_mb, "total_mb": 81920.0}


def test_progress_shows_steps_elapsed_and_eta_from_the_recent_mean_step():
    train = _steps(40)
    text = live_charts.progress_html(train, max_steps=100, status="running", started_at=START,
                                     finished_at=None, now=START + timedelta(seconds=125))
    assert 'value="40" max="100"' in text
    assert "step 40 / 100 · elapsed 2m 05s · ETA 30s" in text  # 60 steps x 0.5 s


def test_a_finished_job_shows_no_eta_and_its_run_time():
    text = live_charts.progress_html(_steps(100), max_steps=100, status="succeeded",
                                     started_at=START, finished_at=START + timedelta(hours=2),
                                     now=START + timedelta(days=3))
    assert "step 100 / 100 · elapsed 2h 00m" in text and "ETA" not in text


def test_memory_per_gpu_has_a_line_a_gpu_the_capacity_and_the_planned_peak():
    gpus = [_gpu(100.0, 0, 1000.0), _gpu(100.0, 1, 1100.0), _gpu(101.5, 0, 1200.0)]
    frame = live_charts.gpu_memory_frame(gpus, planned_mb=5000.0)
    lines = {series: list(zip(rows["seconds"], rows["memory_mb"]))
             for series, rows in frame.groupby("series")}
    assert lines == {"GPU 0": [(0.0, 1000.0), (1.5, 1200.0)], "GPU 1": [(0.0, 1100.0)],
                     "card capacity": [(0.0, 81920.0), (1.5, 81920.0)],
                     "planned peak": [(0.0, 5000.0), (1.5, 5000.0)]}


def test_the_memory_chart_covers_the_job_from_its_start():
    started = START.timestamp()
    processes = [{"time": started + 12.0, "host": "h", "rank": 0, "rss_mb": 500.0},
                 {"time": started + 14.0, "host": "h", "rank": 0, "rss_mb": 520.0}]
    charts = live_charts.live_charts(spec=SPEC, series={"processes": processes},
                                     status="running", started_at=START, finished_at=None)
    points = charts.sampled_memory.dropna()
    assert points["seconds"].tolist() == [12.0, 14.0]  # the model load before it is on the axis
    # SQLite hands back naive UTC datetimes: the same origin.
    naive = live_charts.live_charts(spec=SPEC, series={"processes": processes},
                                    status="running", started_at=START.replace(tzinfo=None),
                                    finished_at=None)
    assert naive.sampled_memory.dropna()["seconds"].tolist() == [12.0, 14.0]
    gpus = [_gpu(started + 3.0, 0, 1000.0)]
    frame = live_charts.gpu_memory_frame(gpus, planned_mb=None, origin=started)
    assert frame["seconds"].tolist() == [3.0, 0.0, 3.0]  # the GPU, then the capacity line


def test_the_planned_peak_comes_from_the_memory_planner_for_the_jobs_strategy():
    planned = live_charts.planned_peak_mb(SPEC, [_gpu(1.0, 0, 1.0)])
    assert planned is not None and planned > 0
    assert live_charts.planned_peak_mb(SPEC.model_copy(update={"model": "/no/such/folder"}), []) is None


def test_on_a_cpu_host_the_sampled_chart_is_each_ranks_rss():
    processes = [{"time": 10.0, "host": "h", "rank": 0, "rss_mb": 500.0},
                 {"time": 10.0, "host": "h", "rank": 1, "rss_mb": 510.0},
                 {"time": 11.0, "host": "h", "rank": 0, "rss_mb": None}]
    charts = live_charts.live_charts(spec=SPEC, series={"train": _steps(3),
                                                             "processes": processes},
                                     status="running", started_at=START, finished_at=None,
                                     now=START)
    assert "RSS" in charts.sampled_memory_title
    assert sorted(charts.sampled_memory["series"]) == ["rank 0", "rank 1"]
    assert list(charts.learning_rate["learning_rate"]) == pytest.approx([1e-4, 2e-4, 3e-4])
    assert list(charts.grad_norm["grad_norm"]) == [1.5, 1.5, 1.5]
    assert list(charts.step_time["step_seconds"]) == [0.5, 0.5, 0.5]
    assert not charts.has_mfu  # CPU steps carry no MFU: the chart stays hidden


def test_the_memory_legends_list_ranks_and_gpus_in_order_whatever_arrived_first():
    processes = [{"time": 10.0, "host": "h", "rank": 1, "rss_mb": 510.0},
                 {"time": 10.5, "host": "h", "rank": 0, "rss_mb": 500.0},
                 {"time": 11.0, "host": "h", "rank": 1, "rss_mb": 520.0}]
    frame = live_charts.rank_rss_frame(processes, world_size=3)
    assert list(dict.fromkeys(frame["series"])) == ["rank 0", "rank 1", "rank 2"]
    assert frame[frame["series"] == "rank 1"]["seconds"].tolist() == [0.0, 1.0]
    gpus = [_gpu(100.0, 1, 1100.0), _gpu(100.5, 0, 1000.0)]
    frame = live_charts.gpu_memory_frame(gpus, planned_mb=None)
    assert list(dict.fromkeys(frame["series"]))[:2] == ["GPU 0", "GPU 1"]


def test_a_job_too_short_for_the_sampler_charts_its_ranks_own_rss_readings():
    """Sampled once a second, a 3-second job has one reading a rank; its ranks logged one
    a step: those make the lines. With the sampler's lines, the sampler's are drawn."""
    epoch = START.timestamp()
    once = [{"time": epoch + 1.0, "host": "h", "rank": rank, "rss_mb": 440.0} for rank in (0, 1)]
    own = [{"time": epoch + 0.1 * step, "rank": rank, "step": step, "rss_mb": 480.0 + step,
            "reserved_mb": None} for step in range(1, 21) for rank in (0, 1)]
    series = {"train": _steps(20), "processes": once, "memory": own}
    charts = live_charts.live_charts(spec=SPEC, series=series, status="succeeded",
                                     started_at=START, finished_at=START, now=START)
    frame = charts.sampled_memory
    assert "RSS" in charts.sampled_memory_title
    assert len(frame[frame["series"] == "rank 0"]) == 20 and max(frame["memory_mb"]) == 500.0
    sampled = [{**row, "time": epoch + second} for second in range(1, 6) for row in once]
    charts = live_charts.live_charts(spec=SPEC, series={**series, "processes": sampled},
                                     status="succeeded", started_at=START, finished_at=START,
                                     now=START)
    assert set(charts.sampled_memory["memory_mb"]) == {440.0}


def test_gpu_ranks_nobody_sampled_chart_their_own_allocator_readings():
    """A Slurm job: no worker samples its nodes, its GPU ranks report memory_reserved."""
    epoch = START.timestamp()
    memory = [{"time": epoch + 2, "rank": rank, "step": 1, "reserved_mb": 900.0 + rank,
               "rss_mb": 300.0} for rank in (0, 1)]
    charts = live_charts.live_charts(spec=SPEC, series={"train": _steps(3), "memory": memory},
                                     status="running", started_at=START, finished_at=None,
                                     now=START)
    assert charts.sampled_memory_title == live_charts.RANK_RESERVED_TITLE
    frame = charts.sampled_memory
    assert sorted(frame["series"].dropna()) == ["rank 0", "rank 1"]
    assert sorted(frame["memory_mb"].dropna()) == [900.0, 901.0]
    # CPU ranks' lines carry no allocator readings: their RSS, as before.
    cpu = [{**row, "reserved_mb": None} for row in memory]
    charts = live_charts.live_charts(spec=SPEC, series={"train": _steps(3), "memory": cpu},
                                     status="running", started_at=START, finished_at=None,
                                     now=START)
    assert "RSS" in charts.sampled_memory_title


def test_mfu_is_charted_when_the_steps_carry_it():
    train = [{**row, "mfu": 0.41} for row in _steps(2)]
    charts = live_charts.live_charts(spec=SPEC, series={"train": train, "gpus": [
        _gpu(1.0, 0, 10.0)]}, status="running", started_at=None, finished_at=None)
    assert charts.has_mfu and list(charts.mfu["mfu"]) == [0.41, 0.41]
    assert charts.sampled_memory_title == "Memory per GPU (NVML)"



def _preference_steps(count):
    """A DPO job's steps: the six preference figures besides the usual ones."""
    return [{**row, "rewards_chosen": 0.1 * row["step"], "rewards_rejected": -0.05 * row["step"],
             "reward_margin": 0.15 * row["step"], "reward_accuracy": 0.5 + row["step"] / 10,
             "logps_chosen": -40.0 + row["step"], "logps_rejected": -45.0 - row["step"]}
            for row in _steps(count)]


def test_a_preference_jobs_rewards_margin_accuracy_and_log_probs_are_charted():
    from tunedeck.metrics.figures import (LOGPS_CHART, PREFERENCE_CHARTS, REWARD_ACCURACY_CHART,
                                          REWARD_MARGIN_CHART, REWARDS_CHART)

    charts = live_charts.live_charts(spec=SPEC, series={"train": _preference_steps(3)},
                                     status="running", started_at=START, finished_at=None)
    assert all(charts.has_chart(chart) for chart in PREFERENCE_CHARTS)

    def lines(chart):
        frame = charts.preference[chart.name]
        return {name: (rows["step"].tolist(), pytest.approx(rows["value"].tolist()))
                for name, rows in frame.groupby("series")}

    # Chosen and rejected share a chart, a line each; unsmoothed by default.
    steps = [1, 2, 3]
    assert lines(REWARDS_CHART) == {"chosen": (steps, [0.1, 0.2, 0.3]),
                                    "rejected": (steps, [-0.05, -0.1, -0.15])}
    assert lines(LOGPS_CHART) == {"chosen": (steps, [-39.0, -38.0, -37.0]),
                                  "rejected": (steps, [-46.0, -47.0, -48.0])}
    assert lines(REWARD_MARGIN_CHART) == {"margin": (steps, [0.15, 0.3, 0.45])}
    assert lines(REWARD_ACCURACY_CHART) == {"accuracy": (steps, [0.6, 0.7, 0.8])}


def test_the_preference_charts_are_smoothed_as_the_loss_is():
    from app.ui.job_page import step_charts
    from tunedeck.metrics.figures import REWARD_MARGIN_CHART, REWARDS_CHART

    train = [{"step": step, "reward_margin": margin, "rewards_chosen": margin,
              "rewards_rejected": -margin}
             for step, margin in enumerate([4.0, 2.0, 4.0, 2.0], start=1)]
    view = step_charts.ChartView(smoothing=0.5)
    charts = live_charts.live_charts(spec=SPEC, series={"train": train}, status="running",
                                     started_at=START, finished_at=None, view=view)
    margin = {name: rows["value"].tolist()
              for name, rows in charts.preference[REWARD_MARGIN_CHART.name].groupby("series")}
    loss = step_charts.loss_frame([{"step": row["step"], "loss": row["reward_margin"]}
                                   for row in train], view=view)
    # The same debiased EMA as the loss, its raw line kept faint behind it.
    assert margin["margin (raw)"] == [4.0, 2.0, 4.0, 2.0]
    assert margin["margin"] == pytest.approx(loss[loss["series"] == "train"]["loss"].tolist())
    rewards = charts.preference[REWARDS_CHART.name]
    assert list(dict.fromkeys(rewards["series"])) == ["chosen (raw)", "chosen", "rejected (raw)",
                                                      "rejected"]
    drawn = step_charts.figure_chart_html(REWARDS_CHART, rewards)
    assert 'class="td-series td-faint" data-series="chosen (raw)"' in drawn
    assert 'class="td-series td-line" data-series="rejected" stroke="#d62728"' in drawn
    assert ">Rewards<" in drawn


def test_an_sft_jobs_page_has_no_preference_charts():
    from app.ui.job_page.live_panel import show_preference
    from tunedeck.metrics.figures import PREFERENCE_CHARTS

    sft = live_charts.live_charts(spec=SPEC, series={"train": _steps(3)}, status="succeeded",
                                  started_at=START, finished_at=START)
    assert not any(sft.has_chart(chart) for chart in PREFERENCE_CHARTS)
    hidden = show_preference(sft)
    assert hidden.visible is False and "td-chart" not in hidden.value
    dpo = live_charts.live_charts(spec=SPEC, series={"train": _preference_steps(2)},
                                  status="running", started_at=START, finished_at=None)
    shown = show_preference(dpo)
    assert shown.visible is True
    assert re.findall(r'<div id="(job-[a-z-]+-plot)"', shown.value) == [
        "job-rewards-plot", "job-reward-margin-plot", "job-reward-accuracy-plot",
        "job-logps-plot"]
    assert not any(live_charts.LiveCharts().has_chart(chart) for chart in PREFERENCE_CHARTS)


def test_the_job_page_of_a_dpo_job_draws_its_preference_charts_from_the_store(database):
    """Through the store on SQLite and the page's handler: the points' figures reach the
    charts, smoothed as the page's view says; an SFT job's page has none."""
    from app.ui.job_page import job_handlers, step_charts
    from tunedeck.metrics.figures import PREFERENCE_CHARTS, REWARD_ACCURACY_CHART

    with database.transaction() as session:
        dpo_job = job_store.create_job(session=session, spec=JobSpec(
            max_steps=10, objective="dpo", dataset="builtin:arithmetic-preference")).id
        sft_job = job_store.create_job(session=session, spec=JobSpec(max_steps=10)).id
        for job_id, rows in ((dpo_job, _preference_steps(4)), (sft_job, _steps(4))):
            metric_store.add_metric_points(session=session, job_id=job_id, events=[
                (seq, {"kind": "step", "rank": 0, **row}) for seq, row in enumerate(rows)])
    raw = step_charts.ChartView(smoothing=0.0)
    page = job_handlers.load_job_page(dpo_job, database=database, principal=OPEN_PRINCIPAL,
                                      view=raw)
    assert all(page.live.has_chart(chart) for chart in PREFERENCE_CHARTS)
    accuracy = page.live.preference[REWARD_ACCURACY_CHART.name]
    assert accuracy["value"].tolist() == pytest.approx([0.6, 0.7, 0.8, 0.9])
    smoothed = job_handlers.load_job_page(dpo_job, database=database, principal=OPEN_PRINCIPAL,
                                          view=step_charts.ChartView(smoothing=0.6))
    assert "accuracy (raw)" in set(smoothed.live.preference[REWARD_ACCURACY_CHART.name]["series"])
    sft = job_handlers.load_job_page(sft_job, database=database, principal=OPEN_PRINCIPAL)
    assert not any(sft.live.has_chart(chart) for chart in PREFERENCE_CHARTS)


def test_jobs_table_shows_progress_loss_throughput_and_peak_memory(database):
    with database.transaction() as session:
        gpu_job = job_store.create_job(session=session, spec=JobSpec(max_steps=20)).id
        cpu_job = job_store.create_job(session=session, spec=JobSpec(max_steps=30)).id
        idle_job = job_store.create_job(session=session, spec=JobSpec(max_steps=5)).id
        events = [(0, {"kind": "step", "rank": 0, "time": 1.0, "step": 1, "loss": 2.5,
                       "tokens_per_second": 800.0}),
                  (1, {"kind": "step", "rank": 0, "time": 2.0, "step": 2, "loss": 2.25,
                       "tokens_per_second": 1200.0}),
                  (2, {"kind": "memory", "rank": 0, "time": 2.0, "peak_mb": 3000.0,
                       "rss_mb": 900.0})]
        metric_store.add_metric_points(session=session, job_id=gpu_job, events=events)
        metric_store.add_metric_points(session=session, job_id=gpu_job, events=[
            (0, {"kind": "memory", "rank": 1, "time": 2.0, "peak_mb": 3500.0, "rss_mb": 1.0})])
        metric_store.add_metric_points(session=session, job_id=cpu_job, events=[
            (0, {"kind": "step", "rank": 0, "time": 1.0, "step": 7, "loss": 1.0}),
            (1, {"kind": "memory", "rank": 0, "time": 1.0, "rss_mb": 640.0})])
    table = jobs_table.jobs_table(database=database, principal=OPEN_PRINCIPAL)
    rows = {job_id_from_cell(row["id"]): row for row in table.to_dict("records")}
    assert rows[gpu_job]["progress"] == "2 / 20 (10%)" and rows[gpu_job]["loss"] == "2.2500"
    assert rows[gpu_job]["tokens/s"] == "1,200" and rows[gpu_job]["peak MB"] == "3,500"
    assert rows[cpu_job]["progress"] == "7 / 30 (23%)" and rows[cpu_job]["peak MB"] == "640"
    assert rows[idle_job]["progress"] == "0 / 5 (0%)" and rows[idle_job]["peak MB"] == ""


def test_before_step_one_the_progress_is_the_current_phase_with_its_bar():
    download = {"phase": "download", "state": "progress", "done": 1_200_000_000,
                "total": 3_400_000_000, "unit": "bytes", "elapsed": 12.0,
                "message": "model.safetensors", "rank": 0, "time": 1000.0}
    text = live_charts.progress_html([], max_steps=100, status="running", started_at=START,
                                     finished_at=None, phase=download)
    assert 'value="1200000000" max="3400000000"' in text
    assert "downloading model.safetensors · 1.20 GB / 3.40 GB · 12 s" in text
    assert "step 0" not in text
    compiling = {"phase": "compile_ops", "state": "progress", "done": None, "total": None,
                 "unit": None, "elapsed": 42.0, "message": None}
    text = live_charts.progress_html([], max_steps=100, status="running", started_at=START,
                                     finished_at=None, phase=compiling)
    assert "<progress" not in text and "compiling ops · 42 s" in text
    # Once steps come, or the job is over, the steps are the progress again.
    for train, status in ((_steps(1), "running"), ([], "failed")):
        text = live_charts.progress_html(train, max_steps=100, status=status, started_at=START,
                                         finished_at=None, phase=download)
        assert "downloading" not in text and "step" in text
