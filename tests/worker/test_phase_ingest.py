"""A rank's phase lines: every one stored as a metric point (the page reads the newest),
each phase's start and end a job event, in the order written."""
import socket

import torch

from trainer.startup.progress import Phase
from trainer.telemetry import FileTelemetry
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import store as metric_store
from tunedeck.run_folder import RunFolder
from worker.metrics_tail import MetricsTail
from worker.supervision import Supervision, _ingest_and_read_control


def test_phase_lines_become_the_latest_phase_and_start_end_events(database, tmp_path):
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=1)).id
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(tmp_path / "run"),
                                   worker_host=socket.gethostname())
    run = RunFolder(tmp_path / "run")
    telemetry = FileTelemetry(run.rank_metrics_file(0), rank=0, device=torch.device("cpu"))
    with Phase(telemetry, "tokenize", total=10, unit="records", min_interval=0.0) as phase:
        phase.advance(4)
        phase.advance(6)
    with Phase(telemetry, "load_shards", total=3, unit="bytes") as phase:
        pass
    telemetry.close()
    tail, supervision = MetricsTail(run), Supervision()
    _ingest_and_read_control(job_id, tail, supervision, database=database)
    _ingest_and_read_control(job_id, tail, supervision, database=database)  # nothing new
    with database.transaction() as session:
        stored = metric_store.read_job_metrics(session=session, job_id=job_id)
        latest = metric_store.latest_phase(session=session, job_id=job_id)
        events = [event.message for event in job_queries.list_job_events(session=session,
                                                                        job_id=job_id)
                  if event.kind == "phase"]
    assert stored["train"] == []
    assert len(latest) == 1
    assert (latest[0]["phase"], latest[0]["state"], latest[0]["total"]) == (
        "load_shards", "end", 3)
    assert [message.split(" · ")[0] for message in events] == [
        "rank 0: tokenizing", "rank 0: tokenizing", "rank 0: loading weights",
        "rank 0: loading weights"]
    assert "10 / 10 records · done" in events[1]
