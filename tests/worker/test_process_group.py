"""The job's processes: stopped whole on cancel, and gone when the worker dies.

A small fake launcher stands in for torchrun: like torchrun it starts its "rank" in a
session of its own, and it either forwards SIGTERM to it or ignores SIGTERM altogether.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from worker.process_group import JobProcesses, start_process_group

FAKE_LAUNCHER = textwrap.dedent("""
    import signal, subprocess, sys, time
    # Like a real rank (trainer/rank.py): SIGKILLed by the kernel when its launcher dies,
    # from the moment it says "ready" (the launcher names it only then).
    rank = subprocess.Popen([sys.executable, "-c",
        "import ctypes, signal, time; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0); "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(600)"],
        start_new_session=True, stdout=subprocess.PIPE)
    rank.stdout.readline()
    def forward(*_):  # like torchrun: pass SIGTERM on to the ranks, then leave
        rank.kill()
        sys.exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[1] == "ignore-term" else forward)
    print(rank.pid, flush=True)
    time.sleep(600)
""")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def launch(tmp_path, mode: str):
    script = tmp_path / "launcher.py"
    script.write_text(FAKE_LAUNCHER)
    log = tmp_path / "logs" / "launcher.log"
    process = start_process_group([sys.executable, str(script), mode], cwd=tmp_path,
                                  env=dict(os.environ), log_file=log)
    return process, wait_for_rank_pid(log)


def wait_for_rank_pid(log) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().strip():
            return int(log.read_text().split()[0])
        time.sleep(0.05)
    raise AssertionError("the fake launcher never started its rank")


def test_stop_takes_down_the_launcher_and_a_rank_in_its_own_session(tmp_path):
    process, rank_pid = launch(tmp_path, "forward-term")
    processes = JobProcesses(process)
    assert set(processes.alive_pids()) == {process.pid, rank_pid}
    processes.stop(grace_seconds=5)
    assert processes.alive_pids() == [] and not alive(rank_pid)


def test_stop_kills_what_ignores_sigterm_after_the_grace_period(tmp_path):
    process, rank_pid = launch(tmp_path, "ignore-term")
    processes = JobProcesses(process)
    started = time.monotonic()
    processes.stop(grace_seconds=1)
    assert processes.alive_pids() == [] and not alive(rank_pid) and process.returncode is not None
    assert time.monotonic() - started < 10


def test_the_job_dies_when_the_worker_is_killed(tmp_path):
    """A stand-in worker launches the job, then is SIGKILLed: nothing of the job remains."""
    script = tmp_path / "launcher.py"
    script.write_text(FAKE_LAUNCHER)
    log = tmp_path / "launcher.log"
    worker_code = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from worker.process_group import start_process_group
        p = start_process_group([sys.executable, {str(script)!r}, "forward-term"], cwd=Path("."),
                                env=dict(os.environ), log_file=Path({str(log)!r}))
        print(p.pid, flush=True)
        time.sleep(600)
    """)
    worker = subprocess.Popen([sys.executable, "-c", worker_code], stdout=subprocess.PIPE, text=True)
    launcher_pid = int(worker.stdout.readline())
    rank_pid = wait_for_rank_pid(log)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    deadline = time.monotonic() + 20
    while (alive(launcher_pid) or alive(rank_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    # The kernel SIGKILLed the launcher (PR_SET_PDEATHSIG), and the rank with it (its own).
    assert not alive(launcher_pid) and not alive(rank_pid)
