"""The warm launcher (worker/warm_launcher.py, trainer/startup/warm_start.py) with real
processes: it gets ready once, forks each job's torchrun, whose ranks, forked from it,
train the built-in model on 2 CPU ranks; two jobs at once both start warm; a cancel and a
dead worker leave no process behind; the sampler tells the forked ranks apart."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.trainer.conftest import write_run
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder
from worker.launch import standby_environment
from worker.process_group import JobProcesses, live_group_members
from worker.sampler import JobSampler
from worker.warm_launcher import WarmLauncher, fits_warm_start, remove_stale_ready_files

pytestmark = pytest.mark.torchrun

REPO = Path(__file__).resolve().parents[2]
READY_SECONDS = 120
RUN_SECONDS = 300


_STARTED: list[WarmLauncher] = []


def ready_launcher(tmp_path: Path) -> WarmLauncher:
    launcher = WarmLauncher(folder=tmp_path / "warm", environment=standby_environment(), cwd=REPO)
    _STARTED.append(launcher)
    launcher.replenish()
    deadline = time.monotonic() + READY_SECONDS
    while not launcher.is_ready():
        assert time.monotonic() < deadline, (tmp_path / "warm" / "standby.log").read_text()
        time.sleep(0.1)
    return launcher


@pytest.fixture(autouse=True)
def stop_warm_launchers():
    """A warm launcher serves until stopped (or its worker, here pytest, dies): each test's
    is stopped after it, not left holding its imports' memory for the rest of the run."""
    yield
    while _STARTED:
        _STARTED.pop().stop()


def job_environment(tunedeck_home: Path) -> dict[str, str]:
    return {**standby_environment(), "TUNEDECK_HOME": str(tunedeck_home), "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false", "TUNEDECK_TEST_MARK": "job-environment"}


def torchrun_argv(run: RunFolder) -> list[str]:
    return json.loads(run.launch_file.read_text())["argv"]


def rank_pids(processes: JobProcesses, run: RunFolder, ranks: int) -> list[int]:
    """The ranks' pids, once both wrote their first metrics line."""
    deadline = time.monotonic() + RUN_SECONDS
    while not all(run.rank_metrics_file(rank).exists() for rank in range(ranks)):
        assert time.monotonic() < deadline and processes.launcher.poll() is None, \
            run.launcher_log_file.read_text()[-3000:]
        time.sleep(0.1)
    processes.refresh()
    return [pid for pid in processes.alive_pids()
            if psutil.Process(pid).name().startswith("td-rank")]


def test_the_warm_launcher_runs_a_job_to_success_with_forked_ranks(tmp_path, tunedeck_home, builtin_model_dir):
    launcher = ready_launcher(tmp_path)
    run = write_run(tmp_path / "run", backend="fsdp", method="lora", max_steps=4, num_gpus=2)
    env = job_environment(tunedeck_home)
    server = launcher._server.pid
    process = launcher.take(torchrun_argv(run), cwd=REPO, env=env, log_file=run.launcher_log_file)
    assert process is not None and psutil.Process(process.pid).ppid() == server
    assert os.getpgid(process.pid) == process.pid  # its own group: a cancel reaches it all
    assert launcher.is_ready()  # it serves the next job too
    from worker.recovery import _launcher_alive

    deadline = time.monotonic() + RUN_SECONDS
    while not _launcher_alive(process.pid, str(run.path)):  # a worker starting on this host
        assert time.monotonic() < deadline  # must not take it for a dead worker's job
        time.sleep(0.1)
    processes = JobProcesses(process)
    pids = rank_pids(processes, run, ranks=2)
    assert len(pids) == 2
    for pid in pids:
        # Forked, not exec'd: the job's launcher is the parent, and the job's environment
        # reached the rank's Python even though /proc still shows the warm launcher's.
        assert psutil.Process(pid).ppid() == process.pid
    sampler = JobSampler.for_launch(host="test", launch_env=env)
    samples = sampler.sample_processes(processes.alive_pids(), time.time())
    assert sorted(sample["index"] for sample in samples) == [0, 1]
    assert process.wait(timeout=RUN_SECONDS) == 0, run.launcher_log_file.read_text()[-3000:]
    assert run.merged_dir.is_dir() and run.adapter_dir.is_dir()
    log = run.launcher_log_file.read_text()
    assert "[default0]:step 4/4" in log and "[default1]" in log
    assert list(run.rank_logs_dir.glob("*/attempt_0/1/stderr.log"))
    processes.kill()
    assert processes.alive_pids() == []


def test_the_rank_sees_the_jobs_environment_not_the_warm_launchers(tmp_path, tunedeck_home):
    """The trainer entry point is not needed to check the environment: a rank of a warm
    torchrun runs `trainer.startup.warm_rank.run_rank`, which must hand `main` the job's variables."""
    launcher = ready_launcher(tmp_path)
    run = write_run(tmp_path / "run", backend="fsdp", method="lora", max_steps=2, num_gpus=2,
                    dataset=str(tmp_path / "missing.jsonl"))
    env = job_environment(tunedeck_home)
    process = launcher.take(torchrun_argv(run), cwd=REPO, env=env, log_file=run.launcher_log_file)
    assert process.wait(timeout=RUN_SECONDS) != 0  # the dataset is missing: every rank fails
    notices = [json.loads(line) for line in run.rank_metrics_file(0).read_text().splitlines()]
    errors = [event["message"] for event in notices if event.get("level") == "error"]
    assert errors and "missing.jsonl" in errors[0]
    # torchrun's own failure summary names the failed ranks, as a cold launch's does.
    assert "ChildFailedError" in run.launcher_log_file.read_text()
    JobProcesses(process).kill()


def test_a_cancel_leaves_nothing_of_a_warm_job(tmp_path, tunedeck_home, builtin_model_dir):
    launcher = ready_launcher(tmp_path)
    run = write_run(tmp_path / "run", backend="fsdp", method="lora", max_steps=10_000, num_gpus=2)
    process = launcher.take(torchrun_argv(run), cwd=REPO, env=job_environment(tunedeck_home),
                            log_file=run.launcher_log_file)
    processes = JobProcesses(process)
    pids = rank_pids(processes, run, ranks=2)
    assert set(pids) <= set(processes.alive_pids())
    processes.stop(grace_seconds=10)
    assert processes.alive_pids() == [] and live_group_members(process.pid) == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in pids)


DYING_WORKER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from worker.launch import standby_environment
    from worker.warm_launcher import WarmLauncher
    launcher = WarmLauncher(folder=Path(sys.argv[1]), environment=standby_environment(),
                            cwd=Path(sys.argv[2]))
    launcher.replenish()
    while not launcher.is_ready():
        time.sleep(0.1)
    request = json.loads(Path(sys.argv[3]).read_text())
    process = launcher.take(request["argv"], cwd=Path(sys.argv[2]), env=request["env"],
                            log_file=Path(request["log_file"]))
    print(process.pid, flush=True)
    time.sleep(3600)
""")


def test_a_killed_worker_takes_its_warm_job_with_it(tmp_path, tunedeck_home, builtin_model_dir):
    run = write_run(tmp_path / "run", backend="fsdp", method="lora", max_steps=10_000, num_gpus=2)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"argv": torchrun_argv(run), "env": job_environment(tunedeck_home),
                                   "log_file": str(run.launcher_log_file)}))
    worker = subprocess.Popen([sys.executable, "-c", DYING_WORKER, str(tmp_path / "warm"),
                               str(REPO), str(request)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        launcher_pid = int(worker.stdout.readline())
        deadline = time.monotonic() + RUN_SECONDS
        while not run.rank_metrics_file(1).exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ranks = psutil.Process(launcher_pid).children()
        assert len(ranks) == 2
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        deadline = time.monotonic() + 30
        while live_group_members(launcher_pid) or any(rank.is_running() and rank.status() != psutil.STATUS_ZOMBIE
                                                      for rank in ranks):
            assert time.monotonic() < deadline, live_group_members(launcher_pid)
            time.sleep(0.2)
    finally:
        if worker.poll() is None:
            worker.kill()


def test_qlora_and_jobs_on_several_nodes_start_cold():
    assert fits_warm_start(JobSpec(max_steps=1, method="lora"))
    assert fits_warm_start(JobSpec(max_steps=1, method="full", backend="fsdp"))
    assert not fits_warm_start(JobSpec(max_steps=1, method="qlora"))
    assert not fits_warm_start(JobSpec(max_steps=1, num_nodes=2))


def test_a_dead_warm_launcher_is_not_handed_a_job_and_is_started_again(tmp_path):
    launcher = ready_launcher(tmp_path)
    launcher._server.kill()
    launcher._server.wait()
    assert not launcher.is_ready()
    assert launcher.take(["torchrun"], cwd=REPO, env={}, log_file=tmp_path / "log") is None
    launcher.replenish()
    deadline = time.monotonic() + READY_SECONDS
    while not launcher.is_ready():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    launcher.stop()


def test_a_stopped_warm_launcher_leaves_no_ready_file(tmp_path):
    launcher = ready_launcher(tmp_path)
    assert list((tmp_path / "warm").glob("*.ready"))
    launcher.stop()
    assert not list((tmp_path / "warm").glob("*.ready"))


def test_the_ready_file_of_a_standby_that_is_gone_is_removed_at_the_next_start(tmp_path):
    """A worker killed without its stop leaves its standby's ready file (which holds the
    standby's pid); the next start removes it, and leaves a live standby's alone."""
    folder = tmp_path / "warm"
    folder.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (folder / "standby-1-2.ready").write_text(str(gone.pid))
    (folder / "standby-3-4.ready").write_text(str(os.getpid()))
    remove_stale_ready_files(folder)
    assert [path.name for path in folder.glob("*.ready")] == ["standby-3-4.ready"]


def test_a_launch_that_fails_to_take_a_job_on_leaves_it_to_a_cold_launch(tmp_path):
    """The forked launcher dies before it has taken the job on (here: the job's folder is
    gone, so it cannot change into it): `take` says "launch cold" instead of handing the
    worker a launcher that is already dead, its reason is logged, and the warm launcher
    serves the next job."""
    launcher = ready_launcher(tmp_path)
    log_file = tmp_path / "run" / "torchrun.log"
    assert launcher.take(["torchrun", "-m", "trainer"], cwd=tmp_path / "gone", env={},
                         log_file=log_file) is None
    assert launcher.is_ready()
    assert "gone" in (tmp_path / "warm" / "standby.log").read_text()  # its reason, logged
    launcher.stop()


def test_two_jobs_at_once_both_start_warm(tmp_path, tunedeck_home, builtin_model_dir):
    """A host running two jobs on disjoint GPUs forks both from the one warm launcher."""
    launcher = ready_launcher(tmp_path)
    runs = [write_run(tmp_path / f"run-{index}", backend="fsdp", method="lora", max_steps=3,
                      num_gpus=2) for index in range(2)]
    processes = [launcher.take(torchrun_argv(run), cwd=REPO, env=job_environment(tunedeck_home),
                               log_file=run.launcher_log_file) for run in runs]
    assert all(process is not None for process in processes)
    for process, run in zip(processes, runs):
        assert process.wait(timeout=RUN_SECONDS) == 0, run.launcher_log_file.read_text()[-3000:]
        assert run.merged_dir.is_dir()
    launcher.stop()


def test_a_sigkilled_forked_rank_is_in_torchruns_report(tmp_path, tunedeck_home, builtin_model_dir):
    """Whichever failure torchrun notices first (the kill, or rank 0's broken connection
    to it), the report names the SIGKILLed rank, as a cold launch's does."""
    from worker.failure_triage import parse_rank_exits

    launcher = ready_launcher(tmp_path)
    run = write_run(tmp_path / "run", backend="fsdp", method="lora", max_steps=10_000, num_gpus=2)
    process = launcher.take(torchrun_argv(run), cwd=REPO, env=job_environment(tunedeck_home),
                            log_file=run.launcher_log_file)
    processes = JobProcesses(process)
    (rank_1,) = [pid for pid in rank_pids(processes, run, ranks=2)
                 if psutil.Process(pid).name() == "td-rank1"]
    os.kill(rank_1, signal.SIGKILL)
    assert process.wait(timeout=RUN_SECONDS) != 0
    exits = parse_rank_exits(run.launcher_log_file.read_text())
    assert any(rank_exit.rank == 1 and rank_exit.signal_name == "SIGKILL" for rank_exit in exits), exits
    processes.kill()
