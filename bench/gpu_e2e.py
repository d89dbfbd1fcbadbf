#!/usr/bin/env python3
"""The product's own path on a GPU: one job through the real worker, checked from its rows.

Unlike the other GPU benches, which launch the trainer the way a worker would, this runs
the worker itself: `tunedeck migrate`, then `tunedeck worker` as a subprocess (SQLite and
the server-less folder broker in a temporary TUNEDECK_HOME, nothing of the web), one job
submitted through `app.actions.submit.submit` (what the web's submit calls), placed on a
GPU by the worker, launched, ingested and exported as any job is. Then, from the database
(read as the job page reads it) and the run folder, it checks:
- device samples: the worker's NVML samples of the job's GPU (on CPU ranks there is no GPU
  row; the sampler stores each rank's process RSS and CPU% instead);
- memory events: the trainer's allocated, reserved and peak figures (null on a CPU rank,
  which reports its RSS);
- planned vs measured: the job page's memory table (its planner call) with rank 0's row,
  and the peak reserved within 25% of the plan (the planner's golden tests hold 10%);
- mfu: a fraction in (0, 1) in every step row (null on CPU: no peak FLOPs figure);
- merged folder: loads with plain transformers and generates a few tokens.
It prints one table (tokens/s, MFU, peak reserved against planned, NVML peak, merged size)
and exits 1 naming each check that failed; `--markdown FILE` appends the table to FILE.

Modes: on a GPU (the default where CUDA answers) a LoRA of a ~1.1B random-weight Llama
(bench/random_llama.py) under FSDP, seq 2048, micro-batch 8, bf16, 1 GPU, 15 steps: about
a minute on one H200. `--cpu`: the tiny shape on one CPU rank, 50 steps of 128 tokens
(tests/bench runs it; about 30 s). Without a GPU and without `--cpu` it says so and exits 0.

On the GPU machine (no internet, no web packages), after building the wheels here with
`../shared/gpu/make-wheels.sh wheels --worker` (plus prompt-toolkit and wcwidth, which
celery's command line imports, until that script fetches them:
`python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12
--implementation cp --platform any -d wheels prompt-toolkit wcwidth`):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site wheels/*.whl
    export PYTHONPATH=/tmp/site:$PWD GRADIO_ANALYTICS_ENABLED=False
    python3 bench/gpu_e2e.py [--markdown bench/results/FILE.md]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from e2e_checks import Check, FinishedJob, all_checks  # noqa: E402
from random_llama import SHAPES, build_random_llama, write_long_rows  # noqa: E402

from app.actions.submit import submit as submit_action  # noqa: E402
from app.auth.principal import OPEN_PRINCIPAL  # noqa: E402
from harness.services import REPO, running_service  # noqa: E402
from tunedeck.jobs import queries as job_queries
from tunedeck.services.broker import make_celery  # noqa: E402
from tunedeck.cluster.workers import live_worker_views  # noqa: E402
from tunedeck.db.engine import Database  # noqa: E402
from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.jobs.states import FINISHED_STATUSES, SUCCEEDED  # noqa: E402
from tunedeck.metrics.series import read_job_series  # noqa: E402
from tunedeck.run_folder import RunFolder  # noqa: E402
from tunedeck.settings import Settings  # noqa: E402
from worker.sampler import load_nvml  # noqa: E402

WORKER_NAME = "gpu-e2e"
STARTUP_SECONDS = 180


@dataclass(frozen=True)
class Mode:
    name: str
    size: str
    seq_len: int
    micro_batch: int
    steps: int


GPU_MODE = Mode("gpu", "1b", seq_len=2048, micro_batch=8, steps=15)
# Enough steps that the rank lives through a few of the worker's one-second samples (a
# tiny step takes ~0.05 s on CPU, and the warm start forks the rank in a moment).
CPU_MODE = Mode("cpu", "tiny", seq_len=64, micro_batch=2, steps=50)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true",
                        help="the tiny model on one CPU rank (what CI runs)")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also append the summary to this file as a markdown section")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds the job may take from submit to its end")
    return parser.parse_args(argv)


def use_home(home: Path) -> None:
    """This process and the worker it starts use `home` alone: no TUNEDECK_* variable of
    the caller (a PostgreSQL URL, another broker) reaches either."""
    for key in [key for key in os.environ if key.startswith("TUNEDECK_")]:
        del os.environ[key]
    os.environ.update({"TUNEDECK_HOME": str(home), "TUNEDECK_ALLOWED_ROOTS": str(home / "data"),
                       "TUNEDECK_WORKER_NAME": WORKER_NAME, "GRADIO_ANALYTICS_ENABLED": "False"})


def migrate() -> None:
    subprocess.run([sys.executable, "-m", "cli", "migrate"], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def write_inputs(data: Path, mode: Mode) -> tuple[Path, Path]:
    """The random Llama and rows that fill seq_len, under the allowed root. The model is
    built in a child process, so this one never holds a CUDA context (NVML counts it)."""
    model, rows = data / f"llama-{mode.size}", data / f"rows-{mode.seq_len}.jsonl"
    data.mkdir(parents=True, exist_ok=True)
    write_long_rows(rows, rows=mode.micro_batch * (mode.steps + 4), words_per_row=mode.seq_len)
    builder = multiprocessing.get_context("spawn").Process(
        target=build_quietly, args=(model, SHAPES[mode.size]))
    builder.start()
    builder.join()
    if builder.exitcode != 0:
        raise RuntimeError(f"building the {mode.size} model failed (exit {builder.exitcode})")
    return model, rows


def build_quietly(folder: Path, shape) -> None:
    """`build_random_llama` without transformers' progress bars around the summary."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    build_random_llama(folder, shape)


def job_spec(mode: Mode, model: Path, rows: Path) -> JobSpec:
    return JobSpec(name=f"gpu-e2e-{mode.name}", model=str(model), dataset=str(rows),
                   method="lora", backend="fsdp", num_gpus=1, max_steps=mode.steps,
                   micro_batch_size=mode.micro_batch, seq_len=mode.seq_len, precision="bf16",
                   learning_rate=1e-4)


def wait_for_worker(database: Database, worker: subprocess.Popen, log: Path) -> None:
    """Until the worker's heartbeat row is online (so submit's checks see it, as the web's do)."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        with database.transaction() as session:
            if any(view.name == WORKER_NAME
                   for view in live_worker_views(session=session, silent_seconds=60)):
                return
        if worker.poll() is not None:
            raise RuntimeError(f"tunedeck worker exited ({worker.returncode}):\n{tail(log)}")
        time.sleep(0.5)
    raise RuntimeError(f"tunedeck worker did not report within {STARTUP_SECONDS} s:\n{tail(log)}")


def submit(spec: JobSpec, settings: Settings, database: Database) -> int:
    """The web's submit, for the open principal of a loopback set-up without accounts."""
    job = submit_action(OPEN_PRINCIPAL, spec, database=database, celery_app=make_celery(settings),
                        settings=settings, client="bench/gpu_e2e.py")
    return job.id


def wait_for_job(job_id: int, database: Database, worker: subprocess.Popen,
                 timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with database.transaction() as session:
            status = job_queries.get_job(session=session, job_id=job_id).status
        if status in FINISHED_STATUSES:
            return status
        if worker.poll() is not None:
            return f"{status}, but the worker exited ({worker.returncode})"
        time.sleep(0.5)
    return f"{status} after {timeout:.0f} s (the worker's stop fails it)"


def read_finished_job(job_id: int, database: Database, settings: Settings) -> FinishedJob:
    with database.transaction() as session:
        job = job_queries.get_job(session=session, job_id=job_id)
        series = read_job_series(session=session, job_id=job_id, max_points=100_000)
        seconds = ((job.finished_at - job.started_at).total_seconds()
                   if job.started_at and job.finished_at else None)
        return FinishedJob(status=job.status, error=job.error, seconds=seconds,
                           spec=job.spec_model, series=series,
                           run=RunFolder(Path(job.run_dir or settings.run_dir_for(job_id))))


def run_job(mode: Mode, home: Path, timeout: float) -> FinishedJob:
    """Worker up, inputs written, one job submitted and waited for; the worker is stopped
    before the checks read (and load the merged model)."""
    migrate()
    settings = Settings()
    database = Database(settings.resolved_database_url)
    # The ranks' threads as the worker would set them on a GPU host; CI's 2 cores get one.
    threads = {} if mode is CPU_MODE else {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}
    log = home / "worker.log"
    try:
        with running_service(["worker"], home=home, env=threads, log_name=log.name) as worker:
            model, rows = write_inputs(home / "data", mode)
            wait_for_worker(database, worker, log)
            job_id = submit(job_spec(mode, model, rows), settings, database)
            status = wait_for_job(job_id, database, worker, timeout)
        job = read_finished_job(job_id, database, settings)
        if status != SUCCEEDED:
            say_why(job_id, status, job, log)
        return job
    finally:
        database.dispose()


def say_why(job_id: int, status: str, job: FinishedJob, worker_log: Path) -> None:
    """A job that did not succeed: its error, the end of its torchrun log (the failing
    rank's own output) and of the worker's log, on stderr."""
    print(f"job {job_id} {status}: {job.error or 'no error recorded'}\n"
          f"--- its torchrun log ends:\n{tail(job.run.launcher_log_file)}\n"
          f"--- the worker's log ends:\n{tail(worker_log, 15)}", file=sys.stderr)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def gpu_name() -> str:
    """The first GPU's name, from NVML: asking torch would give this process a CUDA context,
    which the NVML samples of the job's GPU would count."""
    nvml = load_nvml()
    try:
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
    except Exception:  # no NVML here: the name is only for the headline
        return "unnamed"
    return name.decode() if isinstance(name, bytes) else str(name)


def summary_rows(checks: list[Check]) -> list[str]:
    width = max(len(check.name) for check in checks)
    return [f"{check.name:<{width}}  {'ok' if check.passed else 'FAILED':<6}  {check.found}"
            for check in checks]


def append_markdown(path: Path, headline: str, checks: list[Check], verdict: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"\n## bench/gpu_e2e.py, {stamp}\n", headline, "", "| check | result | found |",
             "|---|---|---|",
             *(f"| {check.name} | {'ok' if check.passed else 'FAILED'} | {check.found} |"
               for check in checks), "", verdict, ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as file:
        file.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    import torch

    on_gpu = torch.cuda.is_available() and not arguments.cpu
    if not on_gpu and not arguments.cpu:
        print("gpu_e2e: no CUDA GPU here; skipped (--cpu runs the tiny model on a CPU rank)")
        return 0
    mode = GPU_MODE if on_gpu else CPU_MODE
    device = f"1 GPU ({gpu_name()})" if on_gpu else "1 CPU rank"
    headline = (f"gpu_e2e: {mode.size} LoRA, fsdp, seq {mode.seq_len}, micro-batch "
                f"{mode.micro_batch}, {mode.steps} steps, bf16, {device}; the real worker, "
                "SQLite, the embedded broker")
    print(headline, flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tunedeck-e2e-") as directory:
        use_home(Path(directory))
        job = run_job(mode, Path(directory), arguments.timeout)
        checks = all_checks(job, on_gpu=on_gpu)
    failed = [check.name for check in checks if not check.passed]
    outcome = f"FAILED: {', '.join(failed)}" if failed else f"all {len(checks)} checks passed"
    verdict = f"gpu_e2e: {outcome} ({time.monotonic() - started:.0f} s in all)"
    print("\n".join(summary_rows(checks)))
    print(verdict, flush=True)
    if arguments.markdown is not None:
        append_markdown(arguments.markdown, headline, checks, verdict)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
