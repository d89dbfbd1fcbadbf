"""Eval points through the store, on SQLite and (marked) PostgreSQL."""
import pytest
from sqlalchemy import select

from tunedeck.db.models import MetricPoint

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import store as metric_store
from tunedeck.metrics.events import decode_event, encode_event


def test_eval_points_round_trip_as_the_eval_series(database):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=10, eval_split=0.1)).id
    lines = [encode_event("step", rank=0, time=1.0, step=5, loss=2.0),
             encode_event("eval", rank=0, time=2.0, step=5, eval_loss=2.25, eval_tokens=400),
             encode_event("eval", rank=1, time=2.0, step=5, eval_loss=2.25, eval_tokens=400),
             encode_event("eval", rank=0, time=3.0, step=10, eval_loss=1.5, eval_tokens=400)]
    events = [(seq, decode_event(line)) for seq, line in enumerate(lines)]
    assert all(event is not None for _, event in events)  # "eval" is a known kind
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)  # idempotent
    with database.transaction() as session:
        metrics = metric_store.read_job_metrics(session=session, job_id=job_id)
        newest = metric_store.newest_step_rows(session=session, job_ids=[job_id])
        assert newest[job_id]["loss"] == 2.0
    assert metrics["eval"] == [  # rank 0's rows: every rank reports the same all-reduced loss
        {"time": 2.0, "step": 5, "eval_loss": 2.25, "eval_tokens": 400},
        {"time": 3.0, "step": 10, "eval_loss": 1.5, "eval_tokens": 400},
    ]
    assert [row["step"] for row in metrics["train"]] == [5]


def test_steps_run_again_after_a_resume_count_once_with_the_later_values(database):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=4)).id
    # Steps 1-3, killed; resumed from the checkpoint at step 2: steps 3 and 4 again.
    losses = [(1, 3.0), (2, 2.5), (3, 2.4), (3, 2.2), (4, 2.0)]
    events = [(seq, decode_event(encode_event("step", rank=0, time=float(seq), step=step, loss=loss)))
              for seq, (step, loss) in enumerate(losses)]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
        train = metric_store.read_job_metrics(session=session, job_id=job_id)["train"]
    assert [(row["step"], row["loss"]) for row in train] == [(1, 3.0), (2, 2.5), (3, 2.2), (4, 2.0)]


def test_an_infinite_gradient_norm_reads_back_as_null(database):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=2)).id
    line = encode_event("step", rank=0, time=1.0, step=1, loss=2.0, grad_norm=float("inf"))
    assert "Infinity" in line  # what json.dumps writes for an fp16 step the scaler skipped
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=[(0, decode_event(line))])
        train = metric_store.read_job_metrics(session=session, job_id=job_id)["train"]
    assert train[0]["grad_norm"] is None and train[0]["loss"] == 2.0


def test_both_mfus_of_a_gpu_step_reach_the_chart_series_from_the_rows_json(database):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=2)).id
    line = encode_event("step", rank=0, time=1.0, step=1, loss=2.0, mfu=0.31, mfu_6n=0.45)
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=[(0, decode_event(line))])
        train = metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=100)["train"]
    assert (train[0]["mfu"], train[0]["mfu_6n"]) == (0.31, 0.45)


def test_a_downsampled_series_keeps_the_resumed_runs_values_not_the_ones_it_replaced(database):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=3000)).id
    # Steps 1-2000 with a spike at 1500; killed, resumed from step 1000: 1000-3000 again.
    first = [(step, 50.0 if step == 1500 else 2.0) for step in range(1, 2001)]
    again = [(step, 1.0) for step in range(1000, 3001)]
    events = [(seq, {"kind": "step", "rank": 0, "time": float(seq), "step": step, "loss": loss})
              for seq, (step, loss) in enumerate(first + again)]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events)
        train = metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=100)["train"]
    steps = [row["step"] for row in train]
    assert len(train) <= 100 and steps == sorted(set(steps))
    assert steps[0] == 1 and steps[-1] == 3000
    assert max(row["loss"] for row in train) == 2.0  # the replaced spike is gone
    assert all(row["loss"] == 1.0 for row in train if row["step"] >= 1000)


def test_the_charted_figures_are_copied_into_their_columns_numbers_only(database):
    from sqlalchemy import select

    from tunedeck.db.models import MetricPoint

    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=2)).id
        metric_store.add_metric_points(session=session, job_id=job_id, events=[
            (0, {"kind": "step", "rank": 0, "time": 1.0, "step": 1, "loss": 2.5,
                 "grad_norm": float("inf"), "learning_rate": 1, "step_seconds": True}),
            (1, {"kind": "memory", "rank": 0, "time": 1.0, "allocated_mb": 1000.5,
                 "rss_mb": float("nan"), "device": "cuda:0"})])
        rows = session.execute(select(
            MetricPoint.kind, MetricPoint.loss, MetricPoint.grad_norm, MetricPoint.learning_rate,
            MetricPoint.step_seconds, MetricPoint.allocated_mb, MetricPoint.rss_mb)
            .order_by(MetricPoint.seq)).all()
    # The chart downsamples on these columns: what is not a finite number is NULL.
    assert [tuple(row) for row in rows] == [("step", 2.5, None, 1.0, None, None, None),
                                            ("memory", None, None, None, None, 1000.5, None)]


def _chart_events(steps, *, first_seq=0, loss=lambda step: 2.0 / (1 + step)):
    """A step line of rank 0 and a memory line of ranks 0 and 1 for each step."""
    events = []
    for offset, step in enumerate(steps):
        seq = first_seq + 2 * offset
        events.append((seq, {"kind": "step", "rank": 0, "time": float(seq), "step": step,
                             "loss": loss(step), "tokens_per_second": 1000.0 + step % 13}))
        events += [(seq + 1, {"kind": "memory", "rank": rank, "time": float(seq), "step": step,
                              "device": f"cuda:{rank}", "allocated_mb": 100.0 + step % 17 + rank})
                   for rank in (0, 1)]
    return events


def _fresh_read(url, job_id, max_points):
    """What a web process that never read this job answers (no cached lines)."""
    from tunedeck.db.engine import Database

    fresh = Database(url)
    try:
        with fresh.transaction() as session:
            return metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=max_points)
    finally:
        fresh.dispose()


def test_a_polled_job_sees_every_new_point_as_a_fresh_read_does(database):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=6000)).id
        metric_store.add_metric_points(session=session, job_id=job_id,
                                       events=_chart_events(range(1, 3001)))
    polls = [(range(3001, 3004), 6000),  # a running job's next points, appended
             (range(2500, 4001), 6100),  # resumed from step 2500: earlier steps again
             (range(4001, 4002), 10_000)]  # one more point, with a spike
    with database.transaction() as session:  # the page opens: its lines are cached
        first = metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=300)
    assert first == _fresh_read(database.url, job_id, 300)
    for steps, first_seq in polls:
        with database.transaction() as session:
            metric_store.add_metric_points(
                session=session, job_id=job_id, events=_chart_events(
                    steps, first_seq=first_seq, loss=lambda step: 99.0 if step == 4001 else 1.0))
        with database.transaction() as session:
            after = metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=300)
        assert after == _fresh_read(database.url, job_id, 300)
        assert after["train"][-1]["step"] == steps[-1] and len(after["train"]) <= 300
        assert {row["rank"] for row in after["memory"] if row["step"] == steps[-1]} == {0, 1}
    assert max(row["loss"] for row in after["train"]) == 99.0
    assert all(row["loss"] == 1.0 for row in after["train"] if 2500 <= row["step"] < 4001)


@pytest.mark.parametrize("nodes", [2, 1])
def test_a_point_committed_after_a_newer_one_is_not_missed(database, nodes, monkeypatch):
    # PostgreSQL hands out ids at insert and two workers (the nodes of a job on several
    # nodes) can commit out of id order: a row below the highest id already read still
    # reaches the chart. A job on one node has one writer, so its count is only checked
    # every VERIFY_SECONDS: made 0 here, the same row is found the same way.
    from tunedeck.db.models import MetricPoint
    from tunedeck.metrics import chart_cache

    if database.url.startswith("sqlite"):
        pytest.skip("SQLite makes its ids visible in order: one writer holds the lock to commit")
    if nodes == 1:
        monkeypatch.setattr(chart_cache, "VERIFY_SECONDS", 0.0)
    with database.transaction() as session:
        job_id = job_store.create_job(session=session,
                                      spec=JobSpec(max_steps=100, num_nodes=nodes)).id
        metric_store.add_metric_points(session=session, job_id=job_id,
                                       events=_chart_events(range(1, 51)))
        metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=2000)
        free_id = 1 + max(point.id for point in session.query(MetricPoint).filter_by(job_id=job_id))

    def insert_step(point_id, seq, step, loss):
        row = metric_store._row(job_id, seq, {"kind": "step", "rank": 0, "time": float(seq),
                                              "step": step, "loss": loss})
        session.execute(MetricPoint.__table__.insert(), [{**row, "id": point_id}])

    with database.transaction() as session:  # the newer row first, then the late one
        insert_step(free_id + 1, 1000, 52, 1.0)
    with database.transaction() as session:
        metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=2000)
        insert_step(free_id, 999, 51, 7.0)
    with database.transaction() as session:
        train = metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=2000)["train"]
    assert [(row["step"], row["loss"]) for row in train][-2:] == [(51, 7.0), (52, 1.0)]


def test_a_single_node_job_between_checks_reads_only_the_new_rows(database, monkeypatch):
    """Between count checks a one-node job's poll asks for the rows above the highest id
    it holds, and nothing else: no count query."""
    from tunedeck.metrics import chart_cache

    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=100)).id
        metric_store.add_metric_points(session=session, job_id=job_id,
                                       events=_chart_events(range(1, 51)))
    with database.transaction() as session:
        metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=2000)
    counted = []
    real_scalar = chart_cache.Session.scalar
    monkeypatch.setattr(chart_cache.Session, "scalar",
                        lambda self, *args, **kwargs: counted.append(args) or real_scalar(self, *args, **kwargs))
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id,
                                       events=_chart_events(range(51, 53), first_seq=500))
    with database.transaction() as session:
        train = metric_store.read_chart_metrics(session=session, job_id=job_id, max_points=2000)["train"]
    assert train[-1]["step"] == 52 and counted == []


def test_a_batch_partly_stored_already_adds_only_its_new_lines_and_keeps_the_transaction(database):
    """PostgreSQL takes a batch through COPY, which has no ON CONFLICT: a batch holding lines
    stored before falls back to the conflict-skipping INSERT without undoing what the same
    transaction did before it. Text with tabs, newlines and backslashes survives COPY."""
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=4)).id
    message = 'tab\there\nnew line \\ backslash "quoted" \\N é'
    events = [(seq, decode_event(encode_event("step", rank=0, time=float(seq), step=seq + 1,
                                              loss=1.0 + seq, note=message)))
              for seq in range(4)]
    with database.transaction() as session:
        metric_store.add_metric_points(session=session, job_id=job_id, events=events[:2])
    with database.transaction() as session:
        other_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        assert metric_store.add_metric_points(session=session, job_id=job_id, events=events) == 4
    with database.transaction() as session:
        train = metric_store.read_job_metrics(session=session, job_id=job_id)["train"]
        assert job_queries.get_job(session=session, job_id=other_id) is not None
    assert [(row["step"], row["loss"]) for row in train] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    with database.transaction() as session:
        notes = session.scalars(select(MetricPoint.values).where(MetricPoint.job_id == job_id)).all()
    assert [values["note"] for values in notes] == [message] * 4
