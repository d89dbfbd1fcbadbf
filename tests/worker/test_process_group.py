"""The launcher's process group: stopped whole on cancel, and gone when the worker dies.

A small fake launcher stands in for torchrun: it starts a grandchild (a "rank") and either
honours SIGTERM or ignores it.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

from worker.process_group import (group_is_alive, live_group_members as live_members,
                                  start_process_group, stop_process_group)

FAKE_LAUNCHER = textwrap.dedent("""
    import signal, subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    def forward(*_):  # like torchrun: pass SIGTERM on to the ranks, then leave
        rank.kill()
        sys.exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[1] == "ignore-term" else forward)
    print("rank", rank.pid, flush=True)
    time.sleep(600)
""")


def wait_for_members(pgid: int, count: int) -> None:
    deadline = time.monotonic() + 20
    while len(live_members(pgid)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(live_members(pgid)) >= count


def launch(tmp_path, mode: str):
    script = tmp_path / "launcher.py"
    script.write_text(FAKE_LAUNCHER)
    return start_process_group([sys.executable, str(script), mode], cwd=tmp_path,
                               env=dict(os.environ), log_file=tmp_path / "logs" / "launcher.log")


def test_stop_takes_down_a_launcher_that_honours_sigterm_and_its_ranks(tmp_path):
    process = launch(tmp_path, "honour-term")
    wait_for_members(process.pid, 2)
    stop_process_group(process, grace_seconds=5)
    assert live_members(process.pid) == [] and not group_is_alive(process.pid)


def test_stop_kills_what_ignores_sigterm_after_the_grace_period(tmp_path):
    process = launch(tmp_path, "ignore-term")
    wait_for_members(process.pid, 2)
    started = time.monotonic()
    stop_process_group(process, grace_seconds=1)
    assert live_members(process.pid) == []
    assert time.monotonic() - started < 10


def test_the_group_dies_when_the_worker_is_killed(tmp_path):
    """A stand-in worker launches the group, then is SIGKILLed: nothing of the job remains."""
    script = tmp_path / "launcher.py"
    script.write_text(FAKE_LAUNCHER)
    worker_code = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from worker.process_group import start_process_group
        p = start_process_group([sys.executable, {str(script)!r}, "honour-term"], cwd=Path("."),
                                env=dict(os.environ), log_file=Path({str(tmp_path / 'w.log')!r}))
        print(p.pid, flush=True)
        time.sleep(600)
    """)
    worker = subprocess.Popen([sys.executable, "-c", worker_code], stdout=subprocess.PIPE, text=True)
    pgid = int(worker.stdout.readline())
    wait_for_members(pgid, 2)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    deadline = time.monotonic() + 20
    while live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    # The kernel sent the launcher SIGTERM (PR_SET_PDEATHSIG), and it took its rank along.
    assert live_members(pgid) == []
