"""TuneDeck on a real Slurm (scripts/ensure_slurm.sh: slurmctld, slurmd, munge and slurmdbd
on this host, one CPU node): the web, a Slurm executor (`tunedeck worker --executor slurm`)
and the job's ranks started by sbatch and srun on the node.

Skipped where Slurm cannot start (no root); CI starts it and sets TUNEDECK_REQUIRE_SLURM,
and there they fail rather than skip."""
from __future__ import annotations

import os
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from harness.chaos_scenarios import FINISHED, SMALL_JOB
from harness.services import running_service
from harness.servers import running_web, wait_for_steps, wait_until

pytestmark = [pytest.mark.torchrun, pytest.mark.slurm]
REPO = Path(__file__).resolve().parents[2]
TWO_RANKS = {**SMALL_JOB, "num_gpus": 2}


def _slurm_answers() -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(state.startswith(("idle", "mixed", "allocated")) for state in out.split())


@pytest.fixture(scope="module")
def slurm():
    if not _slurm_answers():
        subprocess.run([str(REPO / "scripts" / "ensure_slurm.sh")], capture_output=True,
                       timeout=300)
    if not _slurm_answers():
        if os.environ.get("CI") or os.environ.get("TUNEDECK_REQUIRE_SLURM"):
            pytest.fail("Slurm did not start (scripts/ensure_slurm.sh); CI runs these tests")
        pytest.skip("no Slurm here (scripts/ensure_slurm.sh needs root)")


@pytest.fixture
def stack(slurm, tmp_path, sqlite_url):
    """The web and a Slurm executor on one SQLite database and the folder broker; every
    Slurm job the test's jobs had is cancelled afterwards (an executor leaves its jobs to
    Slurm when it stops)."""
    home = tmp_path / "home"
    env = {"TUNEDECK_DATABASE_URL": sqlite_url, "TUNEDECK_SLURM_POLL_SECONDS": "1",
           "TUNEDECK_EXECUTOR": "slurm"}
    with ExitStack() as resources:
        web = resources.enter_context(running_web(home, env=env))
        stack = SlurmStack(resources, web, home, env)
        stack.start_executor()
        try:
            yield stack
        finally:
            for job in web.http.get("/api/jobs").json():
                if job.get("slurm_job_id"):
                    subprocess.run(["scancel", job["slurm_job_id"]], capture_output=True)


class SlurmStack:
    def __init__(self, resources: ExitStack, web, home: Path, env: dict[str, str]):
        self.resources, self.web, self.home, self.env = resources, web, home, env
        self.executors: list = []

    def run_dir(self, job_id: int) -> Path:
        return self.home / "runs" / f"job-{job_id}"

    def start_executor(self, **env: str):
        executor = self.resources.enter_context(running_service(
            ["worker", "--executor", "slurm"], home=self.home, env={**self.env, **env},
            log_name=f"executor-{len(self.executors)}.log"))
        self.executors.append(executor)
        return executor


def slurm_state(slurm_job_id: str) -> str:
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "State", "-j", slurm_job_id],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    return out.split()[0] if out else ""


def wait_for_slurm_state(slurm_job_id: str, state: str, timeout_seconds: float = 60) -> None:
    wait_until(lambda: slurm_state(slurm_job_id) == state, timeout_seconds,
               f"Slurm job {slurm_job_id} to be {state} (it is {slurm_state(slurm_job_id)})")


def node_processes(run_dir: str) -> list[str]:
    """Processes on this host (Slurm's only node) still naming the job's run folder."""
    out = subprocess.run(["pgrep", "-af", run_dir], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.mark.parametrize("backend", ["fsdp", "zero2"])
def test_a_lora_job_runs_through_slurm_to_its_merged_weights(stack, backend):
    web = stack.web
    job_id = web.submit({**TWO_RANKS, "name": f"slurm-{backend}", "backend": backend,
                         "max_steps": 6})
    job = web.wait_for(job_id, FINISHED, timeout_seconds=300)
    assert job["status"] == "succeeded", (job["error"], web.log_tail(job_id))
    slurm_job_id = job["slurm_job_id"]
    assert slurm_job_id and slurm_state(slurm_job_id) == "COMPLETED"
    train = web.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]
    assert [point["step"] for point in train] == list(range(1, 7))
    run = stack.run_dir(job_id)
    script = (run / "job.sbatch").read_text()
    assert "#SBATCH --nodes=1" in script and "--nproc_per_node 2" in script
    assert (run / "logs" / f"slurm-{slurm_job_id}.out").is_file()
    merged = web.http.get(f"/api/jobs/{job_id}/artifacts/merged")
    assert merged.status_code == 200 and merged.content[:2] == b"PK"
    events = [event["message"] for event in web.http.get(f"/api/jobs/{job_id}/events").json()]
    assert f"submitted to Slurm as job {slurm_job_id}" in events
    config = web.http.get(f"/api/jobs/{job_id}/config").json()
    assert config["sbatch_script"] == script
    assert config["argv"] == ["sbatch", "--parsable", str(run / "job.sbatch")]
    log = web.http.get(f"/api/jobs/{job_id}/logs").json()
    assert any("step 6/6" in line for line in log["lines"]), log


def test_the_partitions_limits_are_refused_at_submit(stack):
    """The executor's heartbeat carries its partition (sinfo): one node of this host's CPUs."""
    web = stack.web
    wait_until(lambda: any(worker.get("slurm") for worker in
                           web.http.get("/api/workers").json()["workers"]), 60,
               "the executor's heartbeat with its partition")
    [executor] = web.http.get("/api/workers").json()["workers"]
    assert executor["executor"] == "slurm" and executor["slurm"]["name"] == "debug"
    site = executor["slurm"]["site"]  # how it writes scripts: the form previews one from it
    assert site["runs_dir"] == str(stack.home.resolve() / "runs")
    assert site["options"]["gpus"] is False and site["torchrun"].endswith("torchrun")
    response = web.http.post("/api/jobs", json={**TWO_RANKS, "num_nodes": 2})
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"][-1] == "num_nodes"
    assert "Slurm partition debug has 1" in problem["msg"]


def test_cancel_is_scancel_and_the_job_is_cancelled_once_slurm_says_it_ended(stack):
    web = stack.web
    job_id = web.submit({**TWO_RANKS, "name": "slurm-cancel", "max_steps": 100000})
    wait_for_steps(web, job_id, 2, timeout_seconds=180)
    assert web.http.post(f"/api/jobs/{job_id}/cancel").status_code == 202
    job = web.wait_for(job_id, FINISHED, timeout_seconds=120)
    assert job["status"] == "cancelled", job["error"]
    assert slurm_state(job["slurm_job_id"]) == "CANCELLED"
    wait_until(lambda: node_processes(str(stack.run_dir(job_id))) == [], 30,
               "the ranks to be gone")


def test_a_job_waits_with_slurms_reason_while_the_node_is_taken(stack):
    """The node's 2 cores are taken by a running job: the next job pends in Slurm
    ("Resources"), and the job page says so; cancelled while pending, Slurm drops it."""
    web = stack.web
    first = web.submit({**TWO_RANKS, "name": "slurm-holds-the-node", "max_steps": 100000})
    wait_for_steps(web, first, 1, timeout_seconds=180)
    second = web.submit({**TWO_RANKS, "name": "slurm-waits"})

    def reason() -> str:
        events = web.http.get(f"/api/jobs/{second}/events").json()
        return next((event["message"] for event in reversed(events)
                     if event["kind"] == "placement"), "")

    wait_until(lambda: "waiting for resources on partition debug" in reason(), 60,
               "the waiting job to show Slurm's reason")
    waiting = web.job(second)
    assert waiting["status"] == "queued" and waiting["slurm_job_id"]
    queued = {job["id"]: job for job in web.http.get("/api/workers").json()["queued"]}
    assert "waiting for resources" in queued[second]["waiting"]
    web.http.post(f"/api/jobs/{second}/cancel")
    assert web.wait_for(second, FINISHED, timeout_seconds=60)["status"] == "cancelled"
    wait_for_slurm_state(waiting["slurm_job_id"], "CANCELLED")
    web.http.post(f"/api/jobs/{first}/cancel")
    assert web.wait_for(first, FINISHED, timeout_seconds=120)["status"] == "cancelled"


def test_a_killed_executor_leaves_the_job_running_and_the_next_one_follows_it(stack):
    web = stack.web
    job_id = web.submit({**TWO_RANKS, "name": "slurm-reattach", "max_steps": 400})
    wait_for_steps(web, job_id, 2, timeout_seconds=180)
    slurm_job_id = web.job(job_id)["slurm_job_id"]
    executor = stack.executors[0]
    os.killpg(executor.pid, 9)
    executor.wait(timeout=30)
    time.sleep(2)
    assert slurm_state(slurm_job_id) == "RUNNING"  # killing the executor never kills the job
    stack.start_executor()
    job = web.wait_for(job_id, FINISHED, timeout_seconds=300)
    assert job["status"] == "succeeded", job["error"]
    train = web.http.get(f"/api/jobs/{job_id}/metrics",
                         params={"max_points": 100000}).json()["train"]
    assert [point["step"] for point in train] == list(range(1, 401))  # each step once


def test_a_job_past_its_time_limit_fails_as_timeout(stack):
    """An executor of its own queue whose jobs get sbatch --time=1 (a minute)."""
    stack.start_executor(TUNEDECK_WORKER_QUEUES="short", TUNEDECK_SLURM_TIME_LIMIT="1")
    web = stack.web
    job_id = web.submit({**TWO_RANKS, "name": "slurm-timeout", "queue": "short",
                         "max_steps": 100000})
    job = web.wait_for(job_id, FINISHED, timeout_seconds=240)
    assert (job["status"], job["failure_kind"]) == ("failed", "timeout"), job["error"]
    assert "TIMEOUT" in job["error"]
    assert slurm_state(job["slurm_job_id"]) == "TIMEOUT"


def test_a_requeued_job_resumes_from_its_checkpoint_and_stores_each_step_once(stack):
    web = stack.web
    job_id = web.submit({**TWO_RANKS, "name": "slurm-requeue", "max_steps": 300,
                         "checkpoint_every_steps": 20, "max_restarts": 1})
    wait_for_steps(web, job_id, 45, timeout_seconds=180)
    slurm_job_id = web.job(job_id)["slurm_job_id"]
    subprocess.run(["scontrol", "requeue", slurm_job_id], check=True, timeout=30)
    wait_until(lambda: web.job(job_id)["status"] == "queued", 60, "the job to be queued again")
    # Slurm holds a requeued job back for a while (its begin time); start it now.
    wait_until(lambda: subprocess.run(["scontrol", "update", f"JobId={slurm_job_id}",
                                       "StartTime=now"], capture_output=True).returncode == 0,
               30, "Slurm to take the new start time")
    job = web.wait_for(job_id, FINISHED, timeout_seconds=400)
    assert job["status"] == "succeeded", job["error"]
    assert job["attempts"] == 2 and job["slurm_job_id"] == slurm_job_id
    events = [event["message"] for event in web.http.get(f"/api/jobs/{job_id}/events").json()]
    assert any("resumed from step" in message for message in events), events
    train = web.http.get(f"/api/jobs/{job_id}/metrics",
                         params={"max_points": 100000}).json()["train"]
    assert [point["step"] for point in train] == list(range(1, 301))


def test_a_job_on_two_nodes_runs_with_torchruns_static_rendezvous(stack):
    """Partition multi: two nodes of this host (a slurmd each). One srun task a node, each
    its own torchrun with its node rank, meeting at the first node's NodeAddr."""
    stack.start_executor(TUNEDECK_WORKER_QUEUES="multi", TUNEDECK_SLURM_PARTITION="multi")
    web = stack.web
    job_id = web.submit({**SMALL_JOB, "name": "slurm-two-nodes", "queue": "multi",
                         "num_nodes": 2, "num_gpus": 1, "max_steps": 5})
    job = web.wait_for(job_id, FINISHED, timeout_seconds=300)
    assert job["status"] == "succeeded", (job["error"], web.log_tail(job_id))
    run = stack.run_dir(job_id)
    assert sorted(path.name for path in (run / "metrics").glob("rank-*.jsonl")) == \
        ["rank-0.jsonl", "rank-1.jsonl"]
    train = web.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]
    assert [point["step"] for point in train] == [1, 2, 3, 4, 5]
    output = (run / "logs" / f"slurm-{job['slurm_job_id']}.out").read_text()
    assert "0: " in output and "1: " in output  # srun --label: a line's node
    assert "#SBATCH --nodes=2" in (run / "job.sbatch").read_text()


def test_an_sbatch_error_fails_the_job_with_slurms_message(stack):
    stack.start_executor(TUNEDECK_WORKER_QUEUES="bad",
                         TUNEDECK_SLURM_EXTRA_ARGS="--constraint=nosuchfeature")
    web = stack.web
    job_id = web.submit({**TWO_RANKS, "name": "slurm-refused", "queue": "bad"})
    job = web.wait_for(job_id, FINISHED, timeout_seconds=120)
    assert job["status"] == "failed" and job["slurm_job_id"] is None
    assert job["error"].startswith("Slurm refused the job: sbatch: error:"), job["error"]
    assert "feature" in job["error"].lower()
