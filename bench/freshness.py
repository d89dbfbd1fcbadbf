"""Freshness: from a rank writing a metric line to the point being visible through
`GET /api/jobs/{id}/metrics`, with 20 jobs running at once (target: p95 <= 1 s).

A real `tunedeck up` (HTTP, Celery worker with concurrency = jobs, torchrun, the worker's
tail into SQLite) is started with the `trainer_module` setting naming bench/fake_trainer's
stand-in, so each job's ranks run it: a step line stamped with `time.time()` every 0.1 s, no
model.

A point is visible through the route from the moment the worker's transaction holding it
commits: the route reads the database at each request (the web's chart cache reads the
rows added since its last read; one node's points are committed in id order), so a
request that starts after the commit shows it. Freshness is therefore measured as

    (commit time - the rank's stamp) + the route's answer time under the same load

- commit time: a probe reads each job's newest stored step straight from the database
  every 50 ms (one indexed query for all jobs): an upper bound, up to 50 ms late;
- answer time: one client a job polls the route as the job page does (every 1 s,
  default max_points) for the whole run, so the server carries 20 watchers' load; each
  request's time from sending to the last byte is recorded.

The printed p95 is that of the sum over every (point, request) pair, as if each point's
first request came just after its commit. The same clients also report what they saw
("as seen"): arrival minus stamp, which adds up to one poll interval of waiting.

Reference measured in the same run: the floor the design sets, the worker's tail interval
(0.5 s); printed: p95 / 1 s target.

With --prometheus, a scraper also GETs the web's /metrics every --scrape-seconds (1 s;
Prometheus' own default is 15 s), but only in every other block of --block-seconds of the
measuring time: the blocks without it are the reference, measured in the same run under
the same jobs (alternating, so the jobs' growing point counts weigh on both alike). Printed
then: the route's answer p95 and the freshness p95 with and without the scraper, and
their ratios (target: about 1).

Usage: .venv/bin/python bench/freshness.py [--jobs 20] [--ranks 1] [--seconds 60]
                                            [--client-poll-seconds 1.0]
                                            [--prometheus] [--scrape-seconds 1.0]
                                            [--block-seconds 10]
Takes about --seconds plus start-up (a minute for 20 jobs on a small machine).
"""
from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.servers import fake_trainer_environment, running_tunedeck  # noqa: E402

TARGET_SECONDS = 1.0
WORKER_POLL_SECONDS = 0.5  # Settings.poll_seconds, the default the server runs with
PROBE_SECONDS = 0.05
FINISHED = {"succeeded", "failed", "cancelled"}


def job_spec(index: int, ranks: int) -> dict:
    return {"name": f"freshness-{index}", "model": "builtin:tiny-llama",
            "dataset": "builtin:arithmetic", "method": "lora", "backend": "fsdp",
            "num_gpus": ranks, "max_steps": 1_000_000, "micro_batch_size": 1, "seq_len": 64}


def percentile(values, fraction: float) -> float:
    ordered = np.sort(np.asarray(values, dtype=float))
    return float(ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))])


class NewestSteps:
    """Per job, when each newest step was first seen: (step, time) with steps rising."""

    def __init__(self):
        self.newest: dict[int, int] = {}
        self.first_seen: dict[int, list[tuple[int, float]]] = {}

    def saw(self, job_id: int, step: int | None, when: float) -> None:
        if step is not None and step > self.newest.get(job_id, -1):
            self.newest[job_id] = step
            self.first_seen.setdefault(job_id, []).append((step, when))

    def delays(self, job_id: int, stamps: dict[int, float], since: float) -> list[float]:
        return [delay for _stamp, delay in self.stamped_delays(job_id, stamps, since)]

    def stamped_delays(self, job_id: int, stamps: dict[int, float],
                       since: float) -> list[tuple[float, float]]:
        """Per step stamped after `since`: (its stamp, when it (or a later step) was first
        seen minus its stamp); steps never seen are left out."""
        delays = []
        seen = iter(self.first_seen.get(job_id, []))
        newest, when = next(seen, (None, None))
        for step in sorted(stamps):
            while newest is not None and newest < step:
                newest, when = next(seen, (None, None))
            if newest is None:
                break
            if stamps[step] >= since:
                delays.append((stamps[step], when - stamps[step]))
        return delays


class CommitProbe(threading.Thread):
    """Reads every job's newest stored step from the database every PROBE_SECONDS."""

    def __init__(self, database_file: Path, job_ids: list[int], stop: threading.Event):
        super().__init__(daemon=True)
        self.database_file, self.job_ids, self.stop = database_file, job_ids, stop
        self.steps = NewestSteps()

    def run(self) -> None:
        connection = sqlite3.connect(f"file:{self.database_file}?mode=ro", uri=True, timeout=30)
        marks = ",".join("?" * len(self.job_ids))
        query = (f"SELECT job_id, MAX(step) FROM metric_points WHERE kind = 'step' "
                 f"AND job_id IN ({marks}) GROUP BY job_id")
        while not self.stop.is_set():
            rows = connection.execute(query, self.job_ids).fetchall()
            now = time.time()
            for job_id, step in rows:
                self.steps.saw(job_id, step, now)
            self.stop.wait(PROBE_SECONDS)
        connection.close()


class JobWatcher(threading.Thread):
    """Polls one job's metrics as its page does; records each request's answer time and
    when each newest step arrived."""

    def __init__(self, server, job_id: int, *, poll_seconds: float, stop: threading.Event):
        super().__init__(daemon=True)
        self.server, self.job_id, self.poll_seconds, self.stop = server, job_id, poll_seconds, stop
        self.steps = NewestSteps()
        self.answers: list[tuple[float, float]] = []  # (sent, seconds to the last byte)

    def run(self) -> None:
        http = type(self.server.http)(base_url=self.server.base_url, timeout=60)
        while not self.stop.is_set():
            sent = time.time()
            response = http.get(f"/api/jobs/{self.job_id}/metrics")
            arrived = time.time()
            self.answers.append((sent, arrived - sent))
            train = response.json()["train"]
            self.steps.saw(self.job_id, train[-1]["step"] if train else None, arrived)
            self.stop.wait(self.poll_seconds)
        http.close()


class Blocks:
    """Alternating blocks of the measuring time: even ones without the scraper, odd ones
    with it."""

    def __init__(self, block_seconds: float):
        self.block_seconds = block_seconds
        self.started: float | None = None  # time.time() the measuring began

    def scraping_at(self, moment: float) -> bool:
        return (self.started is not None and moment >= self.started
                and int((moment - self.started) // self.block_seconds) % 2 == 1)


class Scraper(threading.Thread):
    """GETs /metrics every `every` seconds while its block says so, as Prometheus would
    (from loopback, so no token)."""

    def __init__(self, server, blocks: Blocks, *, every: float, stop: threading.Event):
        super().__init__(daemon=True)
        self.server, self.blocks, self.every, self.stop = server, blocks, every, stop
        self.answers: list[float] = []
        self.failures = 0

    def run(self) -> None:
        http = type(self.server.http)(base_url=self.server.base_url, timeout=60)
        while not self.stop.is_set():
            if self.blocks.scraping_at(time.time()):
                sent = time.perf_counter()
                response = http.get("/metrics")
                self.answers.append(time.perf_counter() - sent)
                if response.status_code != 200 or "tunedeck_jobs" not in response.text:
                    self.failures += 1
            self.stop.wait(self.every)
        http.close()


def step_stamps(server, job_id: int) -> dict[int, float]:
    """Every step's stamp, from one full read."""
    train = server.http.get(f"/api/jobs/{job_id}/metrics",
                            params={"max_points": 100_000}).json()["train"]
    return {point["step"]: point["time"] for point in train}


def wait_until_all_show_points(probe: CommitProbe, job_ids: list[int],
                               timeout_seconds: float) -> float:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if all(job_id in probe.steps.newest for job_id in job_ids):
            return time.time()
        time.sleep(0.2)
    missing = [job_id for job_id in job_ids if job_id not in probe.steps.newest]
    raise RuntimeError(f"jobs {missing} stored no point in {timeout_seconds:.0f}s")


def measure(server, arguments) -> dict[str, list[float]]:
    job_ids = [server.submit(job_spec(index, arguments.ranks)) for index in range(arguments.jobs)]
    stop = threading.Event()
    probe = CommitProbe(server.home / "tunedeck.db", job_ids, stop)
    watchers = [JobWatcher(server, job_id, poll_seconds=arguments.client_poll_seconds, stop=stop)
                for job_id in job_ids]
    blocks = Blocks(arguments.block_seconds)
    scraper = Scraper(server, blocks, every=arguments.scrape_seconds, stop=stop)
    try:
        probe.start()
        for watcher in watchers:
            watcher.start()
        started = wait_until_all_show_points(probe, job_ids, arguments.startup_seconds)
        if arguments.prometheus:
            blocks.started = started
            scraper.start()
        print(f"{len(job_ids)} jobs running and storing points; measuring for "
              f"{arguments.seconds:.0f} s", flush=True)
        time.sleep(arguments.seconds)
        stop.set()
        probe.join(timeout=60)
        for watcher in watchers:
            watcher.join(timeout=60)
        if arguments.prometheus:
            scraper.join(timeout=60)
        stamps = {job_id: step_stamps(server, job_id) for job_id in job_ids}
    finally:
        stop.set()
        for job_id in job_ids:
            server.http.post(f"/api/jobs/{job_id}/cancel")
        for job_id in job_ids:
            server.wait_for(job_id, FINISHED, timeout_seconds=120)
    commit = [(stamp, delay) for job_id in job_ids
              for stamp, delay in probe.steps.stamped_delays(job_id, stamps[job_id], started)]
    answers = [(sent, seconds) for watcher in watchers for sent, seconds in watcher.answers
               if sent >= started]
    return {
        "commit": [delay for _stamp, delay in commit],
        "answer": [seconds for _sent, seconds in answers],
        # By whether the scraper ran when the point was stamped / the request was sent.
        "commit_scraped": [delay for stamp, delay in commit if blocks.scraping_at(stamp)],
        "commit_unscraped": [delay for stamp, delay in commit if not blocks.scraping_at(stamp)],
        "answer_scraped": [seconds for sent, seconds in answers if blocks.scraping_at(sent)],
        "answer_unscraped": [seconds for sent, seconds in answers
                             if not blocks.scraping_at(sent)],
        "scrapes": scraper.answers, "scrape_failures": [scraper.failures],
        "seen": [delay for watcher in watchers
                 for delay in watcher.steps.delays(watcher.job_id, stamps[watcher.job_id],
                                                   started)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=1, help="fake ranks a job")
    parser.add_argument("--seconds", type=float, default=60, help="measuring time")
    parser.add_argument("--client-poll-seconds", type=float, default=1.0,
                        help="pause between one job's metric requests (the job page: 1 s)")
    parser.add_argument("--startup-seconds", type=float, default=300)
    parser.add_argument("--prometheus", action="store_true",
                        help="scrape /metrics in every other block; print the p95 ratios")
    parser.add_argument("--scrape-seconds", type=float, default=1.0,
                        help="pause between /metrics scrapes (with --prometheus)")
    parser.add_argument("--block-seconds", type=float, default=10.0,
                        help="length of each block with or without the scraper")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunedeck-bench-") as folder:
        env = {**fake_trainer_environment(), "TUNEDECK_WORKER_CONCURRENCY": str(arguments.jobs)}
        with running_tunedeck(Path(folder) / "server", extra_env=env) as server:
            figures = measure(server, arguments)
    commit, answer, seen = figures["commit"], figures["answer"], figures["seen"]
    if not commit or not answer:
        print("no points measured")
        return 1
    p95 = freshness_p95(commit, answer)
    print(f"{arguments.jobs} jobs x {arguments.ranks} rank(s), a step line every 0.1 s, "
          f"{len(commit)} points and {len(answer)} page requests over {arguments.seconds:.0f} s:")
    print(f"  stored (commit - stamp): p95 {percentile(commit, 0.95) * 1000:.0f} ms, median "
          f"{statistics.median(commit) * 1000:.0f} ms, max {max(commit) * 1000:.0f} ms")
    print(f"  route answer (default max_points, {arguments.client_poll_seconds:g} s polls): "
          f"p95 {percentile(answer, 0.95) * 1000:.0f} ms, median "
          f"{statistics.median(answer) * 1000:.0f} ms")
    print(f"  as seen by the {arguments.client_poll_seconds:g} s pollers (adds their wait): "
          f"p95 {percentile(seen, 0.95) * 1000:.0f} ms, median {statistics.median(seen) * 1000:.0f} ms")
    print(f"  freshness (stored + answer): p95 {p95 * 1000:.0f} ms")
    print(f"  reference, the worker's tail interval: {WORKER_POLL_SECONDS * 1000:.0f} ms; "
          f"p95 / tail interval: {p95 / WORKER_POLL_SECONDS:.2f}")
    print(f"  p95 / 1 s target: {p95 / TARGET_SECONDS:.2f}  target <= 1.00")
    if arguments.prometheus:
        return print_scrape_overhead(figures, arguments)
    return 0


def freshness_p95(commit, answer) -> float:
    # Every (point, request) pair: a point's commit delay plus an answer time of that load.
    rng = np.random.default_rng(0)
    pairs = np.add.outer(rng.choice(commit, min(len(commit), 3000), replace=False),
                         rng.choice(answer, min(len(answer), 1000), replace=False))
    return percentile(pairs.ravel(), 0.95)


def print_scrape_overhead(figures: dict[str, list[float]], arguments) -> int:
    scrapes = figures["scrapes"]
    needed = ["answer_scraped", "answer_unscraped", "commit_scraped", "commit_unscraped"]
    if not scrapes or not all(figures[name] for name in needed):
        print("  /metrics overhead: too short a run for a block of each kind "
              "(raise --seconds or lower --block-seconds)")
        return 1
    without, with_ = (percentile(figures["answer_unscraped"], 0.95),
                      percentile(figures["answer_scraped"], 0.95))
    fresh_without = freshness_p95(figures["commit_unscraped"], figures["answer_unscraped"])
    fresh_with = freshness_p95(figures["commit_scraped"], figures["answer_scraped"])
    print(f"  /metrics scraped every {arguments.scrape_seconds:g} s in alternate "
          f"{arguments.block_seconds:g} s blocks: {len(scrapes)} scrapes, p95 "
          f"{percentile(scrapes, 0.95) * 1000:.0f} ms, median "
          f"{statistics.median(scrapes) * 1000:.0f} ms, {figures['scrape_failures'][0]} failed")
    print(f"  route answer p95 without the scraper {without * 1000:.0f} ms "
          f"({len(figures['answer_unscraped'])} requests), with it {with_ * 1000:.0f} ms "
          f"({len(figures['answer_scraped'])} requests); with / without: {with_ / without:.2f}")
    print(f"  freshness p95 without the scraper {fresh_without * 1000:.0f} ms, with it "
          f"{fresh_with * 1000:.0f} ms; with / without: {fresh_with / fresh_without:.2f}")
    return 0 if figures["scrape_failures"][0] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
