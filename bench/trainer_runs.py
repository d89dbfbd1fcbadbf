"""Running the real trainer under plain `torchrun` for a benchmark, and reading what it printed.

Shared by the scripts in bench/: a run folder laid out as the worker lays it out, the trainer
launched with the same argv, the `training summary` line parsed back, and for a run that
failed, why: the worker's own triage of the ranks' error notices and torchrun's output.
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

from tunedeck.launch_config import backend_config, build_torchrun_argv  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.jobs.failure_kinds import ERROR  # noqa: E402
from tunedeck.metrics.events import NOTICE, PHASE, STEP, decode_event, phase_text  # noqa: E402
from tunedeck.run_folder import RunFolder, write_run_folder  # noqa: E402
from worker.failure_triage import FailureEvidence, classify_failure, describe_failure  # noqa: E402

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
        return read_events(self.run.rank_metrics_file(rank), kind)


def read_events(path: Path, kind: str) -> list[dict]:
    """The `kind` events of one rank's metrics file (none where it is missing)."""
    if not path.is_file():
        return []
    events = map(decode_event, path.read_text(encoding="utf-8").splitlines())
    return [event for event in events if event is not None and event["kind"] == kind]


class TrainerFailed(RuntimeError):
    """A run that ended without its summary. `cause`: one line saying why; `notice`: the
    failing rank's whole error notice ("" where no rank wrote one), e.g. torch's full
    OutOfMemoryError text; `output`: what torchrun printed; `timed_out`: the run's timeout
    ended it (the cause then says how long it was given)."""

    def __init__(self, cause: str, *, notice: str = "", output: str = "", timed_out: bool = False):
        super().__init__("\n".join(part for part in (cause, notice or output[-4000:]) if part))
        self.cause, self.notice, self.output, self.timed_out = cause, notice, output, timed_out


# As much of torchrun's output as the worker's triage reads of torchrun.log (its
# worker/job_runner.py imports the database layer, which a GPU host's bench may lack).
TRIAGE_LOG_LINES = 300


def run_failure(run: RunFolder, *, returncode: int, output: str,
                timed_out_after: float | None) -> TrainerFailed:
    """Why the run failed, read before its folder is removed. A rank that fails writes an
    error notice (trainer/__main__.py); torchrun's own report, the last thing it prints,
    only says that a rank exited 1. A timeout with no notice says how far the run got."""
    notices = error_notices(run)
    if timed_out_after is not None and not notices:
        return TrainerFailed(f"timed out after {timed_out_after:.0f} s{progress_text(run)}",
                             output=output, timed_out=True)
    log_tail = "\n".join(output.splitlines()[-TRIAGE_LOG_LINES:])
    reason = classify_failure(FailureEvidence(returncode=returncode, error_notices=notices,
                                              log_tail=log_tail))
    cause = describe_failure(reason).removeprefix("failure: ")
    if reason.kind == ERROR and not reason.detail:
        cause += f" (torchrun exited {returncode}; no rank wrote an error notice)"
    if timed_out_after is not None:
        cause += f"; the run then hung until its timeout ({timed_out_after:.0f} s)"
    return TrainerFailed(cause, notice=blamed_notice(notices, reason.rank), output=output,
                         timed_out=timed_out_after is not None)


def error_notices(run: RunFolder) -> tuple[tuple[float, int, str], ...]:
    """(time, rank, message) of each error notice in the run's metrics files: what the
    worker hands its triage."""
    return tuple((event["time"], event["rank"], str(event.get("message", "")))
                 for _rank, path in run.rank_metrics_files()
                 for event in read_events(path, NOTICE) if event.get("level") == "error")


def blamed_notice(notices: tuple[tuple[float, int, str], ...], rank: int | None) -> str:
    """The first notice of the rank the triage blames (a peer's may come earlier), else
    the first of all, as "rank K: message"."""
    if not notices:
        return ""
    _time, notice_rank, message = min([notice for notice in notices if notice[1] == rank]
                                      or notices)
    return f"rank {notice_rank}: {message}"


def progress_text(run: RunFolder) -> str:
    """How far a run got: its last step, else what a rank was doing before step 1 (a
    start-up phase such as loading the weights or compiling ops)."""
    steps = [event["step"] for _rank, path in run.rank_metrics_files()
             for event in read_events(path, STEP) if isinstance(event.get("step"), int)]
    if steps:
        return f" at step {max(steps)}"
    phases = [event for _rank, path in run.rank_metrics_files()
              for event in read_events(path, PHASE)]
    if not phases:
        return " before any step was recorded"
    return f" before the first step (last: {phase_text(max(phases, key=lambda e: e['time']))})"


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
    export (an 8B merge writes 16 GB) when only the training steps are measured. A run
    that fails or times out raises TrainerFailed, saying why."""
    run = RunFolder(run_dir)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv = [*build_torchrun_argv(spec, str(run.path), torchrun=torchrun),
            "--metrics", "on" if metrics else "off"]
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec), launch={"argv": argv, "env": {}})
    threads = str(max(1, (os.cpu_count() or 1) // spec.num_gpus))
    env = {**os.environ, "TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads)}
    output, returncode, timed_out = _run_torchrun(argv, env=env, timeout_seconds=timeout_seconds,
                                                  stop_after_summary=stop_after_summary)
    summarised = SUMMARY.search(output) is not None
    succeeded = summarised if stop_after_summary else returncode == 0 and not timed_out
    if not succeeded:
        raise run_failure(run, returncode=returncode, output=output,
                          timed_out_after=timeout_seconds if timed_out else None)
    return PlainRun(read_summary(output), run, output)


def _run_torchrun(argv: list[str], *, env: dict[str, str], timeout_seconds: float,
                  stop_after_summary: bool) -> tuple[str, int, bool]:
    """stdout and stderr as one text, the exit code and whether the timeout ended the run.
    The process group (torchrun and its ranks) gets SIGTERM at the timeout and, with
    `stop_after_summary`, at the summary line."""
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timer = threading.Timer(timeout_seconds, _terminate_group, args=(process,))
    timer.daemon = True
    timer.start()
    lines, summarised = [], False
    try:
        for line in process.stdout:
            lines.append(line)
            if stop_after_summary and not summarised and SUMMARY.search(line):
                summarised = True
                _terminate_group(process)
        process.wait()
    finally:
        timed_out = timer.finished.is_set() and not summarised
        timer.cancel()
    return "".join(lines), process.returncode, timed_out


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
