"""Chaos scenarios on a real team set-up (PostgreSQL, Redis, `tunedeck web` and workers as
separate processes), each returning what it measured: the chaos tests assert on it, and
`bench/chaos.py` runs them N times and sums it up.

What every scenario checks of its jobs: each ends in a defined state, none was launched
more often than its restarts allow (a duplicate launch shows as an extra "running"
event), and a succeeded job has every training step once (no lost metric point).
"""
from __future__ import annotations

import signal
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

from harness.servers import (RunningServer, private_redis, running_web, wait_for_steps,
                             wait_for_workers, wait_until)
from harness.services import running_service

FINISHED = {"succeeded", "failed", "cancelled"}
# One CPU rank under FSDP: no DeepSpeed op to build, so a job starts in seconds.
SMALL_JOB = {"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic", "method": "lora",
             "backend": "fsdp", "num_gpus": 1, "max_steps": 4, "learning_rate": 5e-3,
             "micro_batch_size": 4, "seq_len": 64, "precision": "bf16",
             "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}


@dataclass
class ChaosReport:
    scenario: str
    submitted: int = 0
    finished_defined: int = 0
    duplicate_launches: int = 0
    lost_points: int = 0
    detect_seconds: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def account(self, web: RunningServer, job_id: int, *, restarts: int = 0) -> dict:
        """Count one finished job: its state, its launches, its points."""
        job = web.job(job_id)
        self.finished_defined += job["status"] in FINISHED
        launches = sum(1 for event in web.http.get(f"/api/jobs/{job_id}/events").json()
                       if event["kind"] == "status" and event["message"] == "running")
        self.duplicate_launches += max(0, launches - 1 - restarts)
        if job["status"] == "succeeded":
            steps = [point["step"] for point in web.http.get(
                f"/api/jobs/{job_id}/metrics", params={"max_points": 100000}).json()["train"]]
            expected = list(range(1, job["spec"]["max_steps"] + 1))
            self.lost_points += len(set(expected) - set(steps))
            if steps != expected:
                self.problems.append(f"job {job_id}: steps {steps[:5]}... not 1..{expected[-1]}")
        return job


def start_worker(stack: ExitStack, home: Path, env: dict, name: str, queues: str = "default",
                 **settings: str) -> subprocess.Popen:
    extra = {f"TUNEDECK_{key.upper()}": value for key, value in settings.items()}
    return stack.enter_context(running_service(
        ["worker"], home=home, log_name=f"worker-{name}.log",
        env={**env, "TUNEDECK_WORKER_NAME": name, "TUNEDECK_WORKER_QUEUES": queues, **extra}))


def job_processes(home: Path, job_id: int, launcher_pid: int | None = None) -> list[psutil.Process]:
    """Every live process whose command line names the job's run folder (a cold torchrun,
    its ranks), and with `launcher_pid`, every one in the launcher's process group (a warm
    launcher, its fork server and forked ranks, whose command lines name no folder)."""
    from worker.process_group import live_group_members

    run_dir = str(home.resolve() / "runs" / f"job-{job_id}")
    found = {}
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] != psutil.STATUS_ZOMBIE and run_dir in (process.info["cmdline"] or []):
            found[process.pid] = process
    for pid in live_group_members(launcher_pid) if launcher_pid else []:
        try:
            found.setdefault(pid, psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return list(found.values())


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def worker_process(name: str) -> psutil.Process:
    for process in psutil.process_iter(["cmdline", "environ"]):
        try:
            if (process.info["cmdline"] or [])[-1:] == ["worker"] and \
                    (process.info["environ"] or {}).get("TUNEDECK_WORKER_NAME") == name:
                return process
        except psutil.Error:
            continue
    raise AssertionError(f"no worker process named {name}")


def killed_worker(home: Path, env: dict) -> ChaosReport:
    """A worker running two jobs is SIGKILLed: no process of them survives; the job without
    restarts fails as "worker lost" within 30 s of the worker's last heartbeat; the one
    with `max_restarts: 1` resumes from its checkpoint on the other worker and finishes."""
    report = ChaosReport("worker killed mid-job")
    with ExitStack() as stack:
        web = stack.enter_context(running_web(home, env=env))
        first = start_worker(stack, home, env, "first", worker_concurrency="2")
        wait_for_workers(web, {"first"})
        doomed = web.submit({**SMALL_JOB, "name": "no-restarts", "max_steps": 100000})
        restarting = web.submit({**SMALL_JOB, "name": "restarts", "max_steps": 400,
                                 "checkpoint_every_steps": 20, "max_restarts": 1})
        report.submitted += 2
        for job_id in (doomed, restarting):
            wait_until(lambda job_id=job_id: web.job(job_id)["status"] == "running", 120,
                       f"job {job_id} to run")
        wait_until(lambda: web.http.get(f"/api/jobs/{restarting}/checkpoints").json(), 180,
                   "the first checkpoint")
        start_worker(stack, home, env, "second")
        wait_for_workers(web, {"first", "second"})
        launched = {job_id: job_processes(home, job_id, web.job(job_id)["launcher_pid"])
                    for job_id in (doomed, restarting)}
        # Each job: its torchrun and its rank (and the fork server of a warm launch).
        if any(len(processes) < 2 for processes in launched.values()):
            report.problems.append(f"expected a launcher and a rank of each job before the "
                                   f"kill, saw {launched} "
                                   f"(launchers {[web.job(job)['launcher_pid'] for job in launched]})")
        launched = [process for processes in launched.values() for process in processes]
        worker_process("first").send_signal(signal.SIGKILL)
        wait_until(lambda: first.poll() is not None, 10, "the killed worker to exit")
        # torchrun dies with its worker (SIGKILL), and its ranks with it.
        wait_until(lambda: not any(alive(process) for process in launched), 15,
                   "the killed worker's job processes to end")
        lost = web.wait_for(doomed, FINISHED, timeout_seconds=60, poll_seconds=0.25)
        if (lost["status"], lost["failure_kind"]) != ("failed", "worker_lost"):
            report.problems.append(f"job {doomed} ended {lost['status']}: {lost['error']}")
        last_heartbeat = {worker["name"]: worker["last_seen_at"]
                          for worker in web.http.get("/api/workers").json()["workers"]}["first"]
        report.detect_seconds.append((datetime.fromisoformat(lost["finished_at"])
                                      - datetime.fromisoformat(last_heartbeat)).total_seconds())
        web.wait_for(restarting, FINISHED, timeout_seconds=300)
        report.account(web, doomed)
        resumed = report.account(web, restarting, restarts=1)
        if (resumed["status"], resumed["worker_name"], resumed["attempts"]) != \
                ("succeeded", "second", 2):
            report.problems.append(f"job {restarting}: {resumed['status']} on "
                                   f"{resumed['worker_name']} after {resumed['attempts']} "
                                   f"attempts: {resumed['error']}")
    return report


def redis_restarted(home: Path, postgres_url: str) -> ChaosReport:
    """Redis killed and started again, empty, while a job runs, one waits, and one is
    submitted during the outage: the running job goes on, and the other two run once the
    sweep sends their ids again. Redis' visibility timeout is 2 s here, so the running job
    also outlives it several times over: it still runs once."""
    report = ChaosReport("redis restarted mid-job")
    with private_redis() as redis_server, ExitStack() as stack:
        env = {"TUNEDECK_DATABASE_URL": postgres_url, "TUNEDECK_BROKER_URL": redis_server.url,
               "TUNEDECK_REDISPATCH_SECONDS": "5",
               "TUNEDECK_BROKER_VISIBILITY_TIMEOUT_SECONDS": "2"}
        web = stack.enter_context(running_web(home, env=env))
        start_worker(stack, home, env, "only")
        wait_for_workers(web, {"only"})
        running = web.submit({**SMALL_JOB, "name": "running", "max_steps": 200})
        wait_for_steps(web, running, 1)
        waiting = web.submit({**SMALL_JOB, "name": "waiting"})
        redis_server.kill()
        during = web.submit({**SMALL_JOB, "name": "submitted-while-redis-is-down"})
        report.submitted += 3
        time.sleep(2)
        redis_server.start()
        for job_id in (running, waiting, during):
            job = web.wait_for(job_id, FINISHED, timeout_seconds=300)
            if job["status"] != "succeeded" or job["attempts"] != 1:
                report.problems.append(f"job {job_id} {job['status']} after {job['attempts']} "
                                       f"attempts: {job['error']}")
            report.account(web, job_id)
        _check_outlived_visibility(web.job(running), report)
    return report


def _check_outlived_visibility(job: dict, report: ChaosReport, timeout_seconds: float = 2) -> None:
    started, finished = (datetime.fromisoformat(job[key]) for key in ("started_at", "finished_at"))
    if (finished - started).total_seconds() < 3 * timeout_seconds:
        report.problems.append(f"job {job['id']} was too short to outlive the visibility timeout")


def longer_than_visibility_timeout(home: Path, postgres_url: str, redis_url: str) -> ChaosReport:
    """Redis hands an unacknowledged message to another worker after its visibility timeout
    (2 s here); a job running far longer, with a second idle worker, still runs once."""
    report = ChaosReport("job longer than the visibility timeout")
    with ExitStack() as stack:
        env = {"TUNEDECK_DATABASE_URL": postgres_url, "TUNEDECK_BROKER_URL": redis_url,
               "TUNEDECK_BROKER_VISIBILITY_TIMEOUT_SECONDS": "2"}
        web = stack.enter_context(running_web(home, env=env))
        start_worker(stack, home, env, "one")
        start_worker(stack, home, env, "two")
        wait_for_workers(web, {"one", "two"})
        job_id = web.submit({**SMALL_JOB, "name": "long", "max_steps": 150})
        report.submitted += 1
        job = web.wait_for(job_id, FINISHED, timeout_seconds=300)
        _check_outlived_visibility(job, report)
        if job["status"] != "succeeded" or job["attempts"] != 1:
            report.problems.append(f"job {job_id}: {job['status']} after {job['attempts']} "
                                   f"attempts: {job['error']}")
        report.account(web, job_id)
    return report


def web_restarted(home: Path, env: dict) -> ChaosReport:
    """The web killed (SIGKILL) mid-job and started again on another port: the job runs on
    untouched, and the new web shows it, with every point, to the end."""
    report = ChaosReport("web restarted mid-job")
    with ExitStack() as stack:
        first_web = stack.enter_context(running_web(home, env=env))
        start_worker(stack, home, env, "only")
        wait_for_workers(first_web, {"only"})
        # Long enough to outlast a web start (its imports take 6-15 s on a busy 2-core box):
        # at 150 steps the job could finish before the second web answered.
        job_id = first_web.submit({**SMALL_JOB, "name": "web-restart", "max_steps": 600})
        report.submitted += 1
        wait_for_steps(first_web, job_id, 1)
        first_web.process.send_signal(signal.SIGKILL)
        first_web.process.wait(timeout=10)
        with running_web(home, env=env) as second_web:
            if second_web.job(job_id)["status"] != "running":
                report.problems.append(f"job {job_id} is {second_web.job(job_id)['status']} "
                                       "after the web restarted")
            job = second_web.wait_for(job_id, FINISHED, timeout_seconds=300)
            if job["status"] != "succeeded" or job["attempts"] != 1:
                report.problems.append(f"job {job_id}: {job['status']} after {job['attempts']} "
                                       f"attempts: {job['error']}")
            report.account(second_web, job_id)
    return report


def database_unreachable(home: Path, postgres_url: str, redis_url: str) -> ChaosReport:
    """The worker's database connections cut (a proxy drops them and refuses new ones)
    for 8 s mid-job: the job runs on, and every metric line reaches the database after."""
    from sqlalchemy.engine import make_url

    from harness.db_outage_proxy import OutageProxy

    report = ChaosReport("database unreachable mid-job")
    url = make_url(postgres_url)
    proxy = OutageProxy(url.host or "127.0.0.1", url.port or 5432)
    through_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    try:
        with ExitStack() as stack:
            env = {"TUNEDECK_DATABASE_URL": postgres_url, "TUNEDECK_BROKER_URL": redis_url}
            web = stack.enter_context(running_web(home, env=env))
            start_worker(stack, home, {**env, "TUNEDECK_DATABASE_URL": through_proxy}, "only")
            wait_for_workers(web, {"only"})
            job_id = web.submit({**SMALL_JOB, "name": "database-outage", "max_steps": 200})
            report.submitted += 1
            wait_for_steps(web, job_id, 1)
            proxy.cut()
            time.sleep(8)
            proxy.restore()
            job = web.wait_for(job_id, FINISHED, timeout_seconds=300)
            if job["status"] != "succeeded" or job["attempts"] != 1:
                report.problems.append(f"job {job_id}: {job['status']} after {job['attempts']} "
                                       f"attempts: {job['error']}")
            report.account(web, job_id)
    finally:
        proxy.close()
    return report
