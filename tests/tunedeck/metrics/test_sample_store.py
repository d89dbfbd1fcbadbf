"""Samples and downsampled chart series through the stores, on SQLite and (marked)
PostgreSQL: the figures are picked out of the JSON in SQL, which each dialect spells its way."""
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import samples as sample_store, store as metric_store
from tunedeck.metrics.series import read_job_series


def _job(database):
    with database.transaction() as session:
        return job_store.create_job(session=session, spec=JobSpec(max_steps=500)).id


def test_samples_round_trip_and_each_line_is_downsampled_on_its_own(database):
    job_id = _job(database)
    samples = [{"time": float(second), "host": "h", "source": "gpu", "index": gpu,
                "values": {"used_mb": 100.0 + second + (5000.0 if second == 250 else 0.0),
                           "total_mb": 1000.0, "utilization_percent": None}}
               for second in range(500) for gpu in (0, 1)]
    samples.append({"time": 3.0, "host": "h", "source": "process", "index": 1,
                    "values": {"pid": 9, "rss_mb": float("inf"), "cpu_percent": 50.0}})
    with database.transaction() as session:
        assert sample_store.add_samples(session=session, job_id=job_id, samples=samples) == 1001
    with database.transaction() as session:
        gpus = sample_store.read_samples(session=session, job_id=job_id, source="gpu",
                                         max_points=50)
        processes = sample_store.read_samples(session=session, job_id=job_id, source="process")
    for gpu in (0, 1):
        line = [row for row in gpus if row["gpu"] == gpu]
        assert 10 < len(line) <= 50
        assert line[0]["time"] == 0.0 and line[-1]["time"] == 499.0
        assert max(row["used_mb"] for row in line) == 5350.0  # the spike survives
    assert [row["time"] for row in gpus] == sorted(row["time"] for row in gpus)
    assert processes == [{"time": 3.0, "host": "h", "rank": 1, "pid": 9, "rss_mb": None,
                          "cpu_percent": 50.0}]


def test_chart_series_match_the_full_series_when_short_and_shrink_when_long(database):
    job_id = _job(database)
    events = [(seq, {"kind": "step", "rank": 0, "time": float(seq), "step": seq + 1,
                     "loss": 3.0 - seq / 1000, "learning_rate": 1e-4})
              for seq in range(500)]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
        # Memory events of two ranks: each rank's line numbers its own.
        for rank in (0, 1):
            metric_store.add_metric_points(session=session, job_id=job_id, events=[
                (1000 + seq, {"kind": "memory", "rank": rank, "time": float(seq),
                              "rss_mb": 10.0 + seq}) for seq in range(300)])
    with database.transaction() as session:
        full = metric_store.read_job_metrics(session=session, job_id=job_id)
        same = read_job_series(session=session, job_id=job_id, max_points=10_000)
        small = read_job_series(session=session, job_id=job_id, max_points=40)
    for key in ("train", "eval", "memory", "footprint"):
        assert same[key] == full[key]
    assert same["gpus"] == [] and same["processes"] == []
    assert len(small["train"]) <= 40 and small["train"][0] == full["train"][0]
    assert small["train"][-1] == full["train"][-1]
    assert all(len([row for row in small["memory"] if row["rank"] == rank]) <= 40 for rank in (0, 1))
