"""PostgreSQL stopped as a crash would (`pg_ctl stop -m immediate`) for 25 s while a job
runs, under the real web, worker, torchrun and CLI: a private cluster, so nothing else on
the machine loses its database.

During the outage every route answers 503 with Retry-After (never 500, never a hang past
30 s), `tunedeck watch` and `tunedeck logs --follow` wait and resume; after it, the web
answers again by itself, and the job succeeds with each of its steps stored once."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from harness.chaos_scenarios import FINISHED, SMALL_JOB, ChaosReport, start_worker
from harness.outage_probe import LONGEST_ANSWER_SECONDS, OutageProbe, job_routes
from harness.private_postgres import private_postgres_or_skip
from harness.servers import (private_redis, running_tunedeck, running_web, wait_for_steps,
                             wait_for_workers)

pytestmark = [pytest.mark.torchrun, pytest.mark.postgres, pytest.mark.redis]

TUNEDECK = str(Path(sys.executable).parent / "tunedeck")
OUTAGE_SECONDS = 25
# Long enough to run through the outage (about 40 steps a second on a 2-core machine).
STEPS = 1500


def test_postgres_stopped_25_s_mid_job_answers_503_waits_and_loses_nothing(tmp_path):
    home = tmp_path / "home"
    with ExitStack() as stack:
        postgres = stack.enter_context(private_postgres_or_skip(tmp_path / "postgres"))
        redis = stack.enter_context(private_redis())
        env = {"TUNEDECK_DATABASE_URL": postgres.url, "TUNEDECK_BROKER_URL": redis.url}
        web = stack.enter_context(running_web(home, env=env))
        start_worker(stack, home, env, "only")
        wait_for_workers(web, {"only"})
        job_id = web.submit({**SMALL_JOB, "name": "postgres-outage", "max_steps": STEPS})
        wait_for_steps(web, job_id, 1)
        followers = {name: subprocess.Popen(
            [TUNEDECK, *command, "--server", web.base_url], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
            for name, command in (("watch", ["watch", str(job_id), "--interval", "0.5"]),
                                  ("logs", ["logs", str(job_id), "--follow",
                                            "--interval", "0.5"]))}
        for follower in followers.values():
            stack.callback(follower.kill)
        time.sleep(2)  # both have asked once, with the database up

        with OutageProbe(web.base_url, job_routes(job_id)) as prober:
            prober.during.set()
            postgres.stop_immediately()
            time.sleep(OUTAGE_SECONDS)
            postgres.start()
            back = time.monotonic()
            while web.http.get("/healthz").status_code != 200:
                assert time.monotonic() - back < 60, "the web did not find its database again"
                time.sleep(0.1)
            recovered_seconds = time.monotonic() - back
            prober.during.clear()
        print(f"\nstatuses during a {OUTAGE_SECONDS} s PostgreSQL outage: {prober.summary()}; "
              f"/healthz 200 again {recovered_seconds:.2f} s after PostgreSQL started")
        assert_no_500_and_no_hang(prober)
        for route in ("/api/jobs", f"/api/jobs/{job_id}/metrics", "/healthz"):
            assert prober.statuses[(route, 503)] > 0, (route, prober.statuses)

        assert_succeeded_with_every_step_once(web, job_id, "postgres stopped")

        outputs = {}
        for name, follower in followers.items():
            out, err = follower.communicate(timeout=60)
            assert follower.returncode == 0, (name, out[-2000:], err)
            assert "the database is unreachable; retrying (HTTP 503): waiting" in err, (name, err)
            assert "answers again" in err, (name, err)
            outputs[name] = out
        assert "succeeded" in outputs["watch"].splitlines()[-1], outputs["watch"][-500:]
        # What `logs --follow` printed across the outage is the whole log, once.
        assert outputs["logs"] == web.http.get(f"/api/jobs/{job_id}/logs/full").text


# Past the 30 s each SQLite connection waits for a lock: the worker's writes fail, not wait.
SQLITE_LOCK_SECONDS = 35


def test_sqlite_locked_mid_job_answers_no_500_and_loses_no_step(tmp_path):
    """`tunedeck up` on its embedded SQLite, its file write-locked by another process for
    longer than any connection waits for it: reads go on (WAL), nothing answers 500 or hangs
    past 30 s, and the job's lines wait in their files until the lock goes."""
    home = tmp_path / "home"
    with running_tunedeck(home) as server:
        job_id = server.submit({**SMALL_JOB, "name": "sqlite-locked", "max_steps": STEPS})
        wait_for_steps(server, job_id, 1)
        with OutageProbe(server.base_url, job_routes(job_id)) as prober:
            holder = sqlite3.connect(home / "tunedeck.db", isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")
            prober.during.set()
            time.sleep(SQLITE_LOCK_SECONDS)
            holder.execute("ROLLBACK")
            holder.close()
            prober.during.clear()
        print(f"\nstatuses while SQLite was locked {SQLITE_LOCK_SECONDS} s: {prober.summary()}")
        assert_no_500_and_no_hang(prober)
        assert_succeeded_with_every_step_once(server, job_id, "sqlite locked")


def assert_no_500_and_no_hang(prober: OutageProbe) -> None:
    """What the issue asks of the web during the fault: 503 or an answer, never 500 or a hang."""
    seen = {status for _route, status in prober.statuses}
    assert 500 not in seen and seen <= {200, 503}, prober.statuses
    assert prober.longest < LONGEST_ANSWER_SECONDS


def assert_succeeded_with_every_step_once(server, job_id: int, fault: str) -> None:
    """The job came through the fault on its first attempt with steps 1..N stored once each."""
    job = server.wait_for(job_id, FINISHED, timeout_seconds=300)
    assert (job["status"], job["attempts"]) == ("succeeded", 1), job["error"]
    report = ChaosReport(fault)
    report.account(server, job_id)
    assert (report.problems, report.lost_points, report.duplicate_launches) == ([], 0, 0)
