"""Freshness: from a rank writing a metric line to the point being visible through
`GET /api/jobs/{id}/metrics`, with 20 jobs running at once (target: p95 <= 1 s).

A real `tunedeck up` (HTTP, Celery worker with concurrency = jobs, torchrun, the worker's
tail into SQLite) is started in bench/fake_trainer/, so each job's ranks run the fake
trainer found there: a step line stamped with `time.time()` every 0.1 s, no model. One
client thread a job polls its metrics; a point's freshness is the time the response that
first showed it arrived minus the time the rank stamped on it (an upper bound: the point
may have been visible up to one client poll earlier). Points are counted once every job is
running and has shown its first point.

Reference measured in the same run: the floor the design sets, the worker's tail interval
(0.5 s) plus the client's measured revisit interval; the figure printed is p95 / 1 s target.

Usage: .venv/bin/python bench/freshness.py [--jobs 20] [--ranks 1] [--seconds 60]
                                            [--client-poll-seconds 0.25]
Takes about --seconds plus start-up (a minute for 20 jobs on a small machine).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.servers import running_tunedeck  # noqa: E402

FAKE_TRAINER_DIR = Path(__file__).resolve().parent / "fake_trainer"
TARGET_SECONDS = 1.0
WORKER_POLL_SECONDS = 0.5  # Settings.poll_seconds, the default the server runs with
FINISHED = {"succeeded", "failed", "cancelled"}


def job_spec(index: int, ranks: int) -> dict:
    return {"name": f"freshness-{index}", "model": "builtin:tiny-llama",
            "dataset": "builtin:arithmetic", "method": "lora", "backend": "fsdp",
            "num_gpus": ranks, "max_steps": 1_000_000, "micro_batch_size": 1, "seq_len": 64}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


class JobWatcher(threading.Thread):
    """Polls one job's metrics; records (freshness seconds) for every new step point."""

    def __init__(self, server, job_id: int, *, poll_seconds: float, stop: threading.Event):
        super().__init__(daemon=True)
        self.server, self.job_id, self.poll_seconds, self.stop = server, job_id, poll_seconds, stop
        self.seen_steps: set[int] = set()
        self.samples: list[tuple[float, float]] = []  # (point time, freshness seconds)
        self.revisit_seconds: list[float] = []

    def run(self) -> None:
        http = type(self.server.http)(base_url=self.server.base_url, timeout=60)
        last_arrival = None
        while not self.stop.is_set():
            response = http.get(f"/api/jobs/{self.job_id}/metrics")
            arrived = time.time()
            if last_arrival is not None:
                self.revisit_seconds.append(arrived - last_arrival)
            last_arrival = arrived
            for point in response.json()["train"]:
                if point["step"] not in self.seen_steps:
                    self.seen_steps.add(point["step"])
                    self.samples.append((point["time"], arrived - point["time"]))
            self.stop.wait(self.poll_seconds)
        http.close()


def wait_until_all_show_points(watchers: list[JobWatcher], timeout_seconds: float) -> float:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if all(watcher.seen_steps for watcher in watchers):
            return time.time()
        time.sleep(0.2)
    missing = [watcher.job_id for watcher in watchers if not watcher.seen_steps]
    raise RuntimeError(f"jobs {missing} showed no point in {timeout_seconds:.0f}s")


def measure(server, arguments) -> tuple[list[float], list[float]]:
    job_ids = [server.submit(job_spec(index, arguments.ranks)) for index in range(arguments.jobs)]
    stop = threading.Event()
    watchers = [JobWatcher(server, job_id, poll_seconds=arguments.client_poll_seconds, stop=stop)
                for job_id in job_ids]
    try:
        for watcher in watchers:
            watcher.start()
        started = wait_until_all_show_points(watchers, arguments.startup_seconds)
        print(f"{len(job_ids)} jobs running and showing points; measuring for "
              f"{arguments.seconds:.0f} s", flush=True)
        time.sleep(arguments.seconds)
        stop.set()
        for watcher in watchers:
            watcher.join(timeout=60)
    finally:
        stop.set()
        for job_id in job_ids:
            server.http.post(f"/api/jobs/{job_id}/cancel")
        for job_id in job_ids:
            server.wait_for(job_id, FINISHED, timeout_seconds=120)
    freshness = [seconds for watcher in watchers for point_time, seconds in watcher.samples
                 if point_time >= started]
    revisits = [seconds for watcher in watchers for seconds in watcher.revisit_seconds]
    return freshness, revisits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=1, help="fake ranks a job")
    parser.add_argument("--seconds", type=float, default=60, help="measuring time")
    parser.add_argument("--client-poll-seconds", type=float, default=0.25,
                        help="pause between one job's metric requests")
    parser.add_argument("--startup-seconds", type=float, default=300)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
        # The fake `trainer` package has no warm start (trainer.warm_start): launch cold.
        env = {"TUNEDECK_WORKER_CONCURRENCY": str(arguments.jobs), "TUNEDECK_WARM_START": "false"}
        with running_tunedeck(Path(folder) / "server", extra_env=env, cwd=FAKE_TRAINER_DIR) as server:
            freshness, revisits = measure(server, arguments)
    if not freshness:
        print("no points measured")
        return 1
    p95, median = percentile(freshness, 0.95), statistics.median(freshness)
    revisit = statistics.median(revisits)
    print(f"{arguments.jobs} jobs x {arguments.ranks} rank(s), a step line every 0.1 s, "
          f"{len(freshness)} points over {arguments.seconds:.0f} s:")
    print(f"  freshness p95 {p95 * 1000:.0f} ms, median {median * 1000:.0f} ms, "
          f"max {max(freshness) * 1000:.0f} ms")
    print(f"  reference, the design's floor: worker tail {WORKER_POLL_SECONDS * 1000:.0f} ms + "
          f"client revisit {revisit * 1000:.0f} ms (median) = "
          f"{(WORKER_POLL_SECONDS + revisit) * 1000:.0f} ms")
    print(f"  p95 / floor: {p95 / (WORKER_POLL_SECONDS + revisit):.2f}")
    print(f"  p95 / 1 s target: {p95 / TARGET_SECONDS:.2f}  target <= 1.00")
    return 0


if __name__ == "__main__":
    sys.exit(main())
