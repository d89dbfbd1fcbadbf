"""Time to first point: from submitting a tiny LoRA job on an idle worker to its first loss
point visible through `GET /api/jobs/{id}/metrics`, warm caches (target: <= 3 s).

A real `tunedeck up` (HTTP, Celery worker, torchrun, the real trainer on
builtin:tiny-llama with CPU ranks where no GPU exists). One job warms the caches (built-in
assets, page cache, the broker), then each timed job is submitted on an idle worker and
its metrics are polled every 50 ms until the first loss point shows. The job is then
cancelled and waited for, so the next one meets an idle worker again.

Where the start-up goes, from the clocks of the processes themselves: the job's "running"
event (the worker claimed it), launch.json's write (run folder laid out, torchrun started
just after), the rank log folder torchrun makes as it spawns the ranks, rank 0's "loading
model" and "training started" notices and its first step line (times the rank stamped in
metrics/rank-0.jsonl), and the response that showed it. Rank 0 also prints its own
"start-up seconds:" line (trainer/startup/startup_clock.py), which splits the model-build phase
into imports, tokenizer, model, method, data and backend; its median is printed too.

`--launch-only` skips the web, broker and worker: it lays out a run folder as the worker
does and starts the same torchrun command with the same environment, timing launch ->
first step line. It isolates the trainer's start-up (and works while the stack is down).

The figure is the median time-to-first-point / 3 s target; the in-run reference is the
phase breakdown (and the worker's tail interval, Settings.poll_seconds, part of the last
phase). Other processes on the machine slow every phase: note the load with the figures.

Usage: .venv/bin/python bench/first_point.py [--runs 3] [--ranks 2] [--backend fsdp|zero2]
       [--launch-only]
Takes about (runs + 1) x (start-up + cancel), a minute or two on a small CPU machine.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.servers import running_tunedeck  # noqa: E402
from tunedeck.launch_config import backend_config, build_torchrun_argv  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.metrics.events import decode_event  # noqa: E402
from tunedeck.run_folder import RunFolder, write_run_folder  # noqa: E402
from tunedeck.torch_extensions import environment_extensions_dir  # noqa: E402

TARGET_SECONDS = 3.0
API_POLL_SECONDS = 0.05
FILE_POLL_SECONDS = 0.02
FINISHED = {"succeeded", "failed", "cancelled"}
PHASES = ("broker pick-up (submit -> job running)",
          "run folder + torchrun start (running -> launch.json written)",
          "torchrun start-up, rendezvous (launch -> ranks spawned)",
          "rank imports: python, torch, trainer (spawned -> 'loading model')",
          "model build, data (-> 'training started'; split below)",
          "first step (-> first step line)",
          "ingest + API poll (-> point visible)")
LAUNCH_ONLY_PHASES = PHASES[2:6]
# Rank 0's own split of its start-up (trainer/startup/startup_clock.py), e.g.
# "start-up seconds: imports 1.92, examples 0.01, ...".
STARTUP_LINE = re.compile(r"start-up seconds: (.+)$", re.MULTILINE)


def job_spec(ranks: int, backend: str = "fsdp") -> dict:
    return {"name": "first-point", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
            "method": "lora", "backend": backend, "num_gpus": ranks, "max_steps": 200,
            "micro_batch_size": 4, "seq_len": 64, "precision": "bf16"}


def wait_for_first_point(server, job_id: int, timeout_seconds: float = 300) -> float:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if server.http.get(f"/api/jobs/{job_id}/metrics").json()["train"]:
            return time.time()
        job = server.job(job_id)
        if job["status"] in FINISHED:
            raise RuntimeError(f"job {job_id} {job['status']} before a point: {job['error']}")
        time.sleep(API_POLL_SECONDS)
    raise RuntimeError(f"job {job_id} showed no point in {timeout_seconds:.0f}s")


def rank_zero_times(run: RunFolder) -> dict[str, float]:
    times = {}
    metrics_file = run.rank_metrics_file(0)
    if not metrics_file.exists():
        return times
    for line in metrics_file.read_text(encoding="utf-8").splitlines():
        event = decode_event(line)
        if event is None:
            continue
        message = str(event.get("message", ""))
        if event["kind"] == "notice" and message.startswith("loading model"):
            times.setdefault("loading", event["time"])
        elif event["kind"] == "notice" and message.startswith("training started"):
            times.setdefault("training", event["time"])
        elif event["kind"] == "step":
            times.setdefault("step", event["time"])
    return times


def ranks_spawned_time(run: RunFolder) -> float:
    """When torchrun spawned the ranks: it makes each rank's log folder (and the log files
    in it) just before starting that rank's process."""
    folders = list(run.rank_logs_dir.glob("*/attempt_*/0"))
    if not folders:
        raise RuntimeError(f"no rank log folder under {run.rank_logs_dir}")
    return min(folder.stat().st_mtime for folder in folders)


def startup_split(run: RunFolder) -> dict[str, float]:
    """Rank 0's "start-up seconds:" line, as {stage: seconds} (empty if it printed none)."""
    for log_file in run.rank_log_files(0):
        found = STARTUP_LINE.search(log_file.read_text(encoding="utf-8", errors="replace"))
        if found:
            return {name: float(seconds) for name, seconds in
                    (part.rsplit(" ", 1) for part in found.group(1).split(", "))}
    return {}


def running_time(server, job_id: int) -> float:
    for event in server.http.get(f"/api/jobs/{job_id}/events").json():
        if event["kind"] == "status" and event["message"] == "running":
            return datetime.fromisoformat(event["time"]).timestamp()
    raise RuntimeError(f"job {job_id} has no 'running' event")


def rank_marks(run: RunFolder) -> list[float]:
    """launch.json written, ranks spawned, 'loading model', 'training started', first step."""
    rank_times = rank_zero_times(run)
    return [run.launch_file.stat().st_mtime, ranks_spawned_time(run), rank_times["loading"],
            rank_times["training"], rank_times["step"]]


def phase_seconds(marks: list[float]) -> list[float]:
    return [later - earlier for earlier, later in zip(marks, marks[1:])]


def wait_until_idle(server, warm: bool, timeout_seconds: float = 120) -> None:
    """An idle worker: with warm start, its warm launcher is ready (it serves every job
    once its imports are done; trainer/startup/warm_start.py writes its ready file)."""
    deadline = time.monotonic() + timeout_seconds
    while warm and not list((server.home / "warm").glob("*/*.ready")):
        if time.monotonic() > deadline:
            raise RuntimeError("the worker's warm launcher did not get ready")
        time.sleep(0.2)


def timed_run(server, ranks: int, backend: str, *, warm: bool
              ) -> tuple[float, list[float], dict[str, float]]:
    """Seconds to the first visible point, the seconds of each phase, rank 0's split."""
    wait_until_idle(server, warm)
    submitted = time.time()
    job_id = server.submit(job_spec(ranks, backend))
    visible = wait_for_first_point(server, job_id)
    server.http.post(f"/api/jobs/{job_id}/cancel")
    server.wait_for(job_id, FINISHED, timeout_seconds=120)
    run = RunFolder(server.home / "runs" / f"job-{job_id}")
    marks = [submitted, running_time(server, job_id), *rank_marks(run), visible]
    return visible - submitted, phase_seconds(marks), startup_split(run)


def launch_environment(home: Path, ranks: int) -> dict[str, str]:
    """What the worker gives the ranks (worker/job_runner.py's launch environment)."""
    return {**{key: value for key, value in os.environ.items() if not key.startswith("TUNEDECK_")},
            "TUNEDECK_HOME": str(home),
            "TORCH_EXTENSIONS_DIR": os.environ.get(
                "TORCH_EXTENSIONS_DIR", str(environment_extensions_dir())),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS",
                                              str(max(1, (os.cpu_count() or 1) // ranks))),
            "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_launch(home: Path, run_dir: Path, ranks: int, backend: str
                 ) -> tuple[float, list[float], dict[str, float]]:
    """`--launch-only`: seconds from torchrun's start to rank 0's first step line. Its split
    also holds "cpu seconds": the CPU time torchrun and the ranks used up to the stop just
    after that line, a figure that other load on the machine moves much less."""
    spec = JobSpec.model_validate(job_spec(ranks, backend))
    run = RunFolder(run_dir)
    argv = build_torchrun_argv(spec, str(run_dir), torchrun=str(Path(sys.executable).with_name("torchrun")))
    write_run_folder(run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
                     backend_config=backend_config(spec),
                     launch={"argv": argv, "env": {}, "cwd": str(REPO)})
    cpu_before = children_cpu_seconds()
    started = time.time()
    os.utime(run.launch_file, (started, started))
    with run.launcher_log_file.open("w") as log:
        launcher = subprocess.Popen(argv, cwd=REPO, env=launch_environment(home, ranks),
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "step" not in rank_zero_times(run):
            if launcher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"launch ended or stalled before a step: "
                                   f"{run.launcher_log_file.read_text()[-3000:]}")
            time.sleep(FILE_POLL_SECONDS)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=60)
    marks = rank_marks(run)
    split = {**startup_split(run), "cpu seconds, torchrun and all ranks": children_cpu_seconds() - cpu_before}
    return marks[-1] - started, phase_seconds(marks), split


def print_report(arguments, totals: list[float], phases: list[list[float]],
                 splits: list[dict[str, float]], *, mode: str = "") -> None:
    median = statistics.median(totals)
    what = "launch to first step line" if arguments.launch_only else "time to first point"
    print(f"{mode}tiny LoRA job, {arguments.backend}, {arguments.ranks} rank(s), {arguments.runs} "
          f"timed runs (warm caches), load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs:")
    print(f"  {what}: median {median:.2f} s (runs {', '.join(f'{total:.2f}' for total in totals)})")
    print("  where it goes (median seconds of each phase):")
    names = LAUNCH_ONLY_PHASES if arguments.launch_only else PHASES
    for name, seconds in zip(names, zip(*phases)):
        print(f"    {statistics.median(seconds):6.2f}  {name}")
    stages = [stage for stage in splits[0] if all(stage in split for split in splits)] if splits else []
    if stages:
        print("  rank 0's start-up stages, from its process start, and CPU (median seconds):")
        for stage in stages:
            print(f"    {statistics.median(split[stage] for split in splits):6.2f}  {stage}")
    if not arguments.launch_only:
        print(f"  time to first point / 3 s target: {median / TARGET_SECONDS:.2f}  target <= 1.00")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs after one warm-up")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--backend", choices=("fsdp", "zero2"), default="fsdp")
    parser.add_argument("--launch-only", action="store_true",
                        help="time torchrun -> first step line only (no web, broker, worker)")
    parser.add_argument("--start", choices=("warm", "cold", "both"), default="both",
                        help="the worker's launch: its warm launcher (TUNEDECK_WARM_START, "
                             "the default) or plain torchrun; both: cold is the reference")
    arguments = parser.parse_args()
    if arguments.launch_only:
        with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
            home = Path(folder) / "home"
            def run_once(index: int):
                return timed_launch(home, Path(folder) / f"run-{index}", arguments.ranks,
                                    arguments.backend)
            timed = [run_once(index) for index in range(arguments.runs + 1)][1:]  # 1st warms
        print_report(arguments, *_collect(timed))
        return 0
    medians = {}
    for start in (("warm", "cold") if arguments.start == "both" else (arguments.start,)):
        warm = start == "warm"
        with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
            timed = []
            with running_tunedeck(Path(folder) / "server",
                                  extra_env={"TUNEDECK_WARM_START": str(warm).lower()}) as server:
                timed_run(server, arguments.ranks, arguments.backend, warm=warm)  # warm caches
                for index in range(arguments.runs):
                    timed.append(timed_run(server, arguments.ranks, arguments.backend, warm=warm))
                    print(f"{start} start, run {index + 1}: first point after "
                          f"{timed[-1][0]:.2f} s", flush=True)
        totals, phases, splits = _collect(timed)
        print_report(arguments, totals, phases, splits, mode=f"{start} start: ")
        medians[start] = statistics.median(totals)
    if len(medians) == 2:
        print(f"warm start / cold start (reference, same run): "
              f"{medians['warm'] / medians['cold']:.2f}")
    return 0


def _collect(timed):
    totals = [total for total, _phases, _split in timed]
    return totals, [phases for _total, phases, _split in timed], [split for *_rest, split in timed]


if __name__ == "__main__":
    sys.exit(main())
