"""GET /api/jobs/{id}/metrics: the worker's GPU and process samples, and server-side
downsampling (`max_points`) that keeps a 100,000-point job's page small."""
from app.auth.principal import OPEN_PRINCIPAL
from tunedeck.metrics import samples as sample_store, store as metric_store

SPEC = {"name": "live", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
        "method": "lora", "backend": "zero2", "num_gpus": 2, "max_steps": 100_000}
BIG_JOB_POINTS = 100_000


def _gpu_sample(time, gpu, used_mb):
    return {"time": time, "host": "node-a", "source": "gpu", "index": gpu,
            "values": {"used_mb": used_mb, "total_mb": 81920.0, "utilization_percent": 90,
                       "power_w": 300.0, "temperature_c": 60}}


def _process_sample(time, rank, rss_mb):
    return {"time": time, "host": "node-a", "source": "process", "index": rank,
            "values": {"pid": 100 + rank, "rss_mb": rss_mb, "cpu_percent": 99.0}}


def test_metrics_carry_gpu_and_process_samples_by_line(client):
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    with client.app.state.database.transaction() as session:
        sample_store.add_samples(session=session, job_id=job_id, samples=[
            _gpu_sample(1.0, 0, 1000.0), _gpu_sample(1.0, 1, 1100.0), _gpu_sample(2.0, 0, 1200.0),
            _process_sample(1.0, 0, 300.0), _process_sample(1.0, 1, float("nan"))])
    metrics = client.get(f"/api/jobs/{job_id}/metrics").json()
    assert {"train", "eval", "memory", "footprint", "gpus", "processes"} <= set(metrics)
    assert [(row["gpu"], row["used_mb"]) for row in metrics["gpus"]] == [
        (0, 1000.0), (1, 1100.0), (0, 1200.0)]
    assert metrics["gpus"][0] == {"time": 1.0, "host": "node-a", "gpu": 0, "used_mb": 1000.0,
                                  "total_mb": 81920.0, "utilization_percent": 90,
                                  "power_w": 300.0, "temperature_c": 60}
    assert metrics["processes"] == [
        {"time": 1.0, "host": "node-a", "rank": 0, "pid": 100, "rss_mb": 300.0, "cpu_percent": 99.0},
        {"time": 1.0, "host": "node-a", "rank": 1, "pid": 101, "rss_mb": None, "cpu_percent": 99.0}]


PREFERENCE = {"rewards_chosen": 0.42, "rewards_rejected": -0.31, "reward_margin": 0.73,
              "reward_accuracy": 0.875, "logps_chosen": -41.5, "logps_rejected": -58.25}


def test_a_preference_steps_figures_come_back_in_the_train_rows_and_an_sft_steps_do_not(client):
    """Through the real store on SQLite: the DPO figures have no columns of their own (no
    migration); they come back from each kept row's JSON, as MFU does."""
    from tunedeck.metrics.events import PREFERENCE_FIELDS, decode_event, encode_event

    dpo = client.post("/api/jobs", json={**SPEC, "objective": "dpo",
                                         "dataset": "builtin:arithmetic-preference"})
    assert dpo.status_code == 201, dpo.text
    dpo_job, sft_job = dpo.json()["id"], client.post("/api/jobs", json=SPEC).json()["id"]
    step = {"loss": 0.69, "learning_rate": 1e-4, "grad_norm": 1.0, "tokens_per_second": 900.0,
            "step_seconds": 0.5, "tokens": 450}
    with client.app.state.database.transaction() as session:
        for job_id, figures in ((dpo_job, PREFERENCE), (sft_job, {})):
            metric_store.add_metric_points(session=session, job_id=job_id, events=[
                (seq, decode_event(encode_event("step", rank=0, time=float(seq), step=seq + 1,
                                                **step, **figures)))
                for seq in range(30)])
    for max_points in (100_000, 10):  # every row, and a downsampled series
        train = client.get(f"/api/jobs/{dpo_job}/metrics?max_points={max_points}").json()["train"]
        assert train and all({key: row[key] for key in PREFERENCE_FIELDS} == PREFERENCE
                             for row in train), train[0]
        assert train[0]["loss"] == 0.69
        sft = client.get(f"/api/jobs/{sft_job}/metrics?max_points={max_points}").json()["train"]
        assert sft and not any(key in row for row in sft for key in PREFERENCE_FIELDS), sft[0]
        assert sft[0]["loss"] == 0.69 and "mfu" in sft[0]  # the rest as before


def test_max_points_is_checked(client):
    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    assert client.get(f"/api/jobs/{job_id}/metrics?max_points=1").status_code == 422
    assert client.get(f"/api/jobs/{job_id}/metrics?max_points=50").status_code == 200


def _store_big_job(database, job_id):
    """Rows straight into the tables (executemany): the store's conflict-checked inserts are
    tested elsewhere, and 10^5 of them would make this test slow."""
    from tunedeck.db.models import JobSample, MetricPoint

    steps = [{"job_id": job_id, "kind": "step", "rank": 0, "seq": step, "step": step,
              "time": float(step), "values": {
                  "step": step, "loss": 40.0 if step == 50_000 else 5.0 - step * 1e-5,
                  "learning_rate": 1e-4, "grad_norm": 1.0, "tokens_per_second": 1000.0,
                  "step_seconds": 0.5}}
             for step in range(1, BIG_JOB_POINTS + 1)]  # step 50,000: a spike the chart must keep
    # The charted figures also have columns of their own, as the store's inserts fill them.
    steps = [{**row, **metric_store.chart_figure_columns(row["values"])} for row in steps]
    samples = [{"job_id": job_id, "time": float(second), "host": "node-a", "source": "gpu",
                "index": 0, "values": {"used_mb": 1000.0 + second % 7, "total_mb": 81920.0}}
               for second in range(BIG_JOB_POINTS)]
    with database.transaction() as session:
        session.execute(MetricPoint.__table__.insert(), steps)
        session.execute(JobSample.__table__.insert(), samples)


def test_a_100000_point_job_comes_back_downsampled_to_api_and_page(client):
    from app.ui.job_page.job_handlers import load_job_page
    from app.ui.job_page.live_charts import LIVE_CHART_POINTS

    job_id = client.post("/api/jobs", json=SPEC).json()["id"]
    database = client.app.state.database
    _store_big_job(database, job_id)

    metrics = client.get(f"/api/jobs/{job_id}/metrics").json()
    assert 900 < len(metrics["train"]) <= 2000 and 900 < len(metrics["gpus"]) <= 2000
    assert metrics["train"][0]["step"] == 1 and metrics["train"][-1]["step"] == BIG_JOB_POINTS
    assert max(row["loss"] for row in metrics["train"]) == 40.0
    small = client.get(f"/api/jobs/{job_id}/metrics?max_points=100").json()
    assert len(small["train"]) <= 100 and len(small["gpus"]) <= 100

    page = load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    # Each line of the loss chart (smoothed, and raw behind it) within the budget.
    assert page.loss.dropna().groupby("series").size().max() <= LIVE_CHART_POINTS
    assert len(page.live.learning_rate) <= LIVE_CHART_POINTS
    assert len(page.live.sampled_memory.dropna()) <= 2 * LIVE_CHART_POINTS  # used + capacity
    assert "100,000 / 100,000" in page.live.progress_html
