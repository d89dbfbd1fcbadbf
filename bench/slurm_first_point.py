"""Time to first point through Slurm, against the local executor on the same machine.

Three stacks on this host, one after the other, each on its own TUNEDECK_HOME and SQLite:
`tunedeck up` with the local executor as configured by default (warm start: a standby
torchrun holds torch imported), the local executor cold (TUNEDECK_WARM_START=false), and
the web with a Slurm executor (`tunedeck worker --executor slurm`) against the one-host
Slurm of scripts/ensure_slurm.sh. In each, a tiny LoRA job (2 CPU ranks) is submitted
`--runs` times on an idle stack, and the time from the submit to its first loss point
visible through `GET /api/jobs/{id}/metrics` is taken; the job is then cancelled.

Slurm always starts a job cold (sbatch, slurmctld's scheduling pass, srun on the node, then
torchrun importing torch): the fair reference is the cold local executor, measured in the
same run. Printed: the medians and the ratios Slurm / local cold and Slurm / local warm.

Usage: .venv/bin/python bench/slurm_first_point.py [--runs 3] [--poll-seconds 1]
Needs a running Slurm (scripts/ensure_slurm.sh, as root). About two minutes.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.first_point import FINISHED, job_spec, wait_for_first_point, wait_until_idle  # noqa: E402
from harness.services import running_service  # noqa: E402
from harness.servers import running_tunedeck, running_web, wait_until


def timed_runs(server, runs: int, *, warm: bool) -> list[float]:
    seconds = []
    for _ in range(runs):
        wait_until_idle(server, warm)
        submitted = time.time()
        job_id = server.submit(job_spec(2))
        seconds.append(wait_for_first_point(server, job_id) - submitted)
        server.http.post(f"/api/jobs/{job_id}/cancel")
        server.wait_for(job_id, FINISHED, timeout_seconds=180)
    return seconds


def local(runs: int, *, warm: bool) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-local-") as home, \
            running_tunedeck(Path(home), extra_env={
                "TUNEDECK_WARM_START": "true" if warm else "false"}) as server:
        timed_runs(server, 1, warm=warm)  # warms the caches: built-in assets, page cache
        return timed_runs(server, runs, warm=warm)


def slurm(runs: int, poll_seconds: float) -> list[float]:
    from tunedeck.db.migrate import upgrade_database

    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-slurm-") as home, ExitStack() as stack:
        url = f"sqlite:///{home}/tunedeck.db"
        upgrade_database(url)
        env = {"TUNEDECK_DATABASE_URL": url, "TUNEDECK_EXECUTOR": "slurm",
               "TUNEDECK_SLURM_POLL_SECONDS": str(poll_seconds)}
        server = stack.enter_context(running_web(Path(home), env=env))
        stack.enter_context(running_service(["worker", "--executor", "slurm"], home=Path(home),
                                            env=env, log_name="executor.log"))
        wait_until(lambda: server.http.get("/api/workers").json()["workers"], 60,
                   "the Slurm executor's first heartbeat")
        timed_runs(server, 1, warm=False)
        return timed_runs(server, runs, warm=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--poll-seconds", type=float, default=1.0,
                        help="TUNEDECK_SLURM_POLL_SECONDS of the Slurm executor (default 1)")
    arguments = parser.parse_args()
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        sys.exit("no Slurm answers: run scripts/ensure_slurm.sh (as root) first")
    results = {"local, warm start": local(arguments.runs, warm=True),
               "local, cold start": local(arguments.runs, warm=False),
               "Slurm executor": slurm(arguments.runs, arguments.poll_seconds)}
    print(f"tiny LoRA job, fsdp, 2 CPU ranks, {arguments.runs} timed runs each "
          f"(Slurm poll {arguments.poll_seconds:g} s):")
    for name, seconds in results.items():
        runs = ", ".join(f"{value:.2f}" for value in seconds)
        print(f"  {name:<18} median {statistics.median(seconds):5.2f} s  (runs {runs})")
    through_slurm = statistics.median(results["Slurm executor"])
    print(f"Slurm / local cold start: {through_slurm / statistics.median(results['local, cold start']):.2f}")
    print(f"Slurm / local warm start: {through_slurm / statistics.median(results['local, warm start']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
