"""Running the real trainer under plain `torchrun` for a benchmark, and reading what it printed.

Shared by the scripts in bench/: a run folder laid out as the worker lays it out, the trainer
launched with the same argv, and the `training summary` line parsed back.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tunedeck.backend_config import backend_config, build_torchrun_argv  # noqa: E402
from tunedeck.job_spec import JobSpec  # noqa: E402
from tunedeck.metrics.events import decode_event  # noqa: E402
from tunedeck.run_folder import RunFolder, write_run_folder  # noqa: E402

SUMMARY = re.compile(r"training summary: tokens=(\d+) seconds=([\d.]+) "
                     r"tokens_per_second=([\d.]+) median_step_seconds=([\d.]+)"
                     r"(?: telemetry_seconds=([\d.]+))?")


@dataclass(frozen=True)
class Summary:
    tokens_per_second: float
    median_step_seconds: float
    seconds: float = 0.0  # the steps after the first, in all
    telemetry_seconds: float = 0.0  # of `seconds`, handing figures to the telemetry


@dataclass(frozen=True)
class PlainRun:
    summary: Summary
    run: RunFolder
    output: str

    def events(self, rank: int, kind: str) -> list[dict]:
        path = self.run.rank_metrics_file(rank)
        if not path.is_file():
            return []
        events = map(decode_event, path.read_text(encoding="utf-8").splitlines())
        return [event for event in events if event is not None and event["kind"] == kind]


def read_summary(log_text: str) -> Summary:
    match = SUMMARY.search(log_text)
    if match is None:
        raise RuntimeError("no training summary in the log:\n" + log_text[-3000:])
    return Summary(float(match.group(3)), float(match.group(4)), seconds=float(match.group(2)),
                   telemetry_seconds=float(match.group(5) or 0.0))


def run_plain_torchrun(home: Path, spec: JobSpec, run_dir: Path, *, metrics: bool = False,
                       timeout_seconds: float = 3600, stop_after_summary: bool = False) -> PlainRun:
    """The trainer on `spec.num_gpus` local ranks, exactly as a worker would launch it.
    `stop_after_summary`: end the ranks once rank 0 printed its summary, skipping the
    export (an 8B merge writes 16 GB) when only the training steps are measured."""
    run = RunFolder(run_dir)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv = [*build_torchrun_argv(spec, str(run.path), torchrun=torchrun),
            "--metrics", "on" if metrics else "off"]
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec), launch={"argv": argv, "env": {}})
    threads = str(max(1, (os.cpu_count() or 1) // spec.num_gpus))
    env = {**os.environ, "TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads)}
    if stop_after_summary:
        output = _run_until_summary(argv, env=env, timeout_seconds=timeout_seconds)
        return PlainRun(read_summary(output), run, output)
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=timeout_seconds)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(f"trainer exited {result.returncode}:\n{output[-4000:]}")
    return PlainRun(read_summary(result.stdout), run, output)


def _run_until_summary(argv: list[str], *, env: dict[str, str], timeout_seconds: float) -> str:
    """stdout and stderr as one text; the process group gets SIGTERM at the summary line,
    or at the timeout (a RuntimeError saying so)."""
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timer = threading.Timer(timeout_seconds, _terminate_group, args=(process,))
    timer.daemon = True
    timer.start()
    lines, summarised = [], False
    try:
        for line in process.stdout:
            lines.append(line)
            if not summarised and SUMMARY.search(line):
                summarised = True
                _terminate_group(process)
        process.wait()
    finally:
        timed_out = timer.finished.is_set() and not summarised
        timer.cancel()
    output = "".join(lines)
    if not summarised:
        reason = f"timed out after {timeout_seconds:.0f} s" if timed_out else f"exited {process.returncode}"
        raise RuntimeError(f"trainer {reason} without a summary:\n{output[-4000:]}")
    return output


def _terminate_group(process: subprocess.Popen) -> None:
    """SIGTERM to torchrun and its ranks; SIGKILL 30 s later if they are still there."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        killer = threading.Timer(30, _kill_group, args=(process,))
        killer.daemon = True
        killer.start()


def _kill_group(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
