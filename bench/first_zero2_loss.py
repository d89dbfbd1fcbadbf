"""A fresh clone's first ZeRO-2 job: seconds from Submit to its first loss point, against
an FSDP job's in the same run (goal: <= 10 s; it was about two minutes while DeepSpeed
JIT-compiled its shared-memory all-reduce on CPU ranks before step 1).

Each job is the first of its own stack, as on a fresh clone: a real `tunedeck up` (HTTP,
Celery worker, torchrun, the real trainer on builtin:tiny-llama, CPU ranks where no GPU
exists) on a new TUNEDECK_HOME and a new, empty TUNEDECK_TORCH_EXTENSIONS_DIR, so no op
built by an earlier job, test or install is found. `make run`'s install step builds no op
either: there is none to measure. The Submit is the POST of the job once the worker's
warm launcher is ready (a newcomer signs in and fills the form meanwhile); the first
loss point is the first train row `GET /api/jobs/{id}/metrics` returns. The job is then
cancelled, and the extension folder listed: it must stay empty.

Printed: each backend's seconds (median over `--runs` fresh stacks), ZeRO-2 / 10 s goal, and
ZeRO-2 / FSDP (the reference: the same start-up without DeepSpeed). Other processes on the
machine slow both: note the load with the figures.

Usage: .venv/bin/python bench/first_zero2_loss.py [--runs 1] [--ranks 2]
Takes about a minute a stack on a small CPU machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.first_point import FINISHED, job_spec, wait_for_first_point, wait_until_idle  # noqa: E402
from harness.servers import running_tunedeck  # noqa: E402

GOAL_SECONDS = 10.0
BACKENDS = ("zero2", "fsdp")


def first_loss_on_a_fresh_stack(backend: str, ranks: int) -> tuple[float, list[str]]:
    """Seconds from Submit to the first loss point of the first job of a new stack, and what
    the job left in the stack's (at first empty) extension folder."""
    with tempfile.TemporaryDirectory(prefix="tunedeck-first-zero2-") as folder:
        extensions_root = Path(folder) / "torch_extensions"
        with running_tunedeck(Path(folder) / "home", extra_env={
                "TUNEDECK_TORCH_EXTENSIONS_DIR": str(extensions_root)}) as server:
            wait_until_idle(server, warm=True)
            submitted = time.time()
            job_id = server.submit({**job_spec(ranks, backend), "name": f"first-{backend}"})
            seconds = wait_for_first_point(server, job_id) - submitted
            server.http.post(f"/api/jobs/{job_id}/cancel")
            server.wait_for(job_id, FINISHED, timeout_seconds=120)
        built = sorted(str(path.relative_to(extensions_root))
                       for path in extensions_root.glob("*/*")) if extensions_root.exists() else []
    return seconds, built


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="fresh stacks per backend")
    parser.add_argument("--ranks", type=int, default=2)
    arguments = parser.parse_args()
    medians = {}
    for backend in BACKENDS:
        seconds = []
        for index in range(arguments.runs):
            took, built = first_loss_on_a_fresh_stack(backend, arguments.ranks)
            seconds.append(took)
            print(f"{backend}, fresh stack {index + 1}: first loss {took:.2f} s after Submit; "
                  f"ops built: {', '.join(built) or 'none'}", flush=True)
        medians[backend] = statistics.median(seconds)
    print(f"first job of a fresh stack, tiny LoRA, {arguments.ranks} rank(s), load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs:")
    for backend, median in medians.items():
        print(f"  {backend}: median {median:.2f} s from Submit to the first loss point")
    print(f"  zero2 / {GOAL_SECONDS:.0f} s goal: {medians['zero2'] / GOAL_SECONDS:.2f}  target <= 1.00")
    print(f"  zero2 / fsdp (reference, same run): {medians['zero2'] / medians['fsdp']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
