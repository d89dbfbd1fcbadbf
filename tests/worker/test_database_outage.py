"""The database unreachable while a job runs (a real PostgreSQL behind a proxy that cuts
every connection): the job runs on, the worker keeps its metric lines and stores every
one once the database is back, and the outcome is recorded after the outage."""
import socket
import sys
import threading
import time

import pytest
from sqlalchemy.engine import make_url

from harness.db_outage_proxy import OutageProxy
from tunedeck.jobs import queries as job_queries
from tunedeck.jobs import store as job_store
from tunedeck.db.engine import Database
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics import store as metric_store
from tunedeck.run_folder import RunFolder
from tunedeck.settings import Settings
from worker.job_runner import RunResult, record_outcome
from worker.outcome import Outcome
from worker.process_group import JobProcesses, start_process_group
from worker.supervision import supervise

pytestmark = pytest.mark.postgres
LINES = 60

# A "rank" writing one step line every 0.1 s for 6 s, then exiting cleanly.
RANK = """
import json, sys, time
with open(sys.argv[1], "a") as metrics:
    for step in range(1, {lines} + 1):
        metrics.write(json.dumps({{"kind": "step", "rank": 0, "time": time.time(), "step": step,
                                   "loss": 1.0 / step}}) + "\\n")
        metrics.flush()
        time.sleep(0.1)
""".format(lines=LINES)


def test_metric_lines_written_while_the_database_is_down_are_all_stored(tmp_path, postgres_url):
    url = make_url(postgres_url)
    proxy = OutageProxy(url.host, url.port or 5432)
    database = Database(url.set(host="127.0.0.1", port=proxy.port)
                        .render_as_string(hide_password=False))
    direct = Database(postgres_url)
    try:
        with direct.transaction() as session:
            job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=LINES)).id
            job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(tmp_path),
                                       worker_host=socket.gethostname())
        run = RunFolder(tmp_path / "run")
        run.metrics_dir.mkdir(parents=True)
        launcher = start_process_group(
            [sys.executable, "-c", RANK, str(run.rank_metrics_file(0))], cwd=tmp_path, env={},
            log_file=tmp_path / "launcher.log")
        # Down from 1 s to 4 s into the job's 6 s: about half its lines are written meanwhile.
        outage = threading.Timer(1.0, proxy.cut)
        recovery = threading.Timer(4.0, proxy.restore)
        outage.start()
        recovery.start()
        processes = JobProcesses(launcher)
        try:
            supervision = supervise(job_id, processes, run, settings=Settings(home=tmp_path),
                                    database=database, shutdown_requested=lambda: False)
        finally:
            processes.kill()
        assert launcher.returncode == 0  # the job was not stopped by the outage
        assert not supervision.taken_away and not supervision.stopped_by_shutdown
        with direct.transaction() as session:
            steps = [point["step"] for point in
                     metric_store.read_job_metrics(session=session, job_id=job_id)["train"]]
        assert steps == list(range(1, LINES + 1))
        # The outcome waits out an outage too.
        proxy.cut()
        threading.Timer(2.0, proxy.restore).start()
        started = time.monotonic()
        record_outcome(job_id, RunResult(Outcome.CANCELLED), database=database)
        assert time.monotonic() - started >= 1.5
        with direct.transaction() as session:
            assert job_queries.get_job(session=session, job_id=job_id).status == "cancelled"
    finally:
        proxy.close()
        database.dispose()
        direct.dispose()
