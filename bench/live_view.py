"""Live view: how often the job page visibly updates, and what the browser spends on it,
early and late in a 4000-step run (goal: p95 interval <= 1.2 s late in the run).

A real `tunedeck up` (HTTP, Celery worker, torchrun, the worker's tail into SQLite) runs in
bench/fake_trainer/, so the job's rank is the fake trainer found there: a step line every
`--step-seconds` (0.02 s: 4000 steps in 80 s), no model. Headless Chromium opens the job's
own address (`/?job=ID`); a MutationObserver stamps each change of the headline's text (the
step it names moves every tick while the job runs) with the page's clock. The browser's CPU
is the user + system time of Chromium's processes (all descendants of this one) over each
window, as a share of one core.

Windows: "early" from the first visible step to step `--early-steps`, "late" from step
`--late-from` to `--steps`. The reference measured in the same run is the early window:
a page that stays live over a long run is as quick and as cheap late as early. Printed: the
p95 interval against the 1.2 s goal, and late / early for the interval and the CPU.

Usage: .venv/bin/python bench/live_view.py [--steps 4000] [--step-seconds 0.02]
Takes about steps x step-seconds plus a minute of start-up.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.servers import running_tunedeck  # noqa: E402

FAKE_TRAINER_DIR = Path(__file__).resolve().parent / "fake_trainer"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"]
GOAL_SECONDS = 1.2
FINISHED = {"succeeded", "failed", "cancelled"}

# Each change of the headline's text, stamped (ms, the page's clock) with the step it names.
OBSERVE_HEADLINE_JS = """() => {
  window.__updates = [];
  const headline = document.querySelector('#job-status');
  const record = () => {
    const match = /step (\\d+)/.exec(headline.textContent || '');
    if (!match) return;
    const step = Number(match[1]), updates = window.__updates;
    // One re-render mutates several nodes: an update is a new step on the page.
    if (!updates.length || updates[updates.length - 1][1] !== step)
      updates.push([performance.now(), step]);
  };
  new MutationObserver(record).observe(headline, {subtree: true, childList: true,
                                                  characterData: true});
  record();
}"""


def job_spec(steps: int) -> dict:
    return {"name": "live-view", "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
            "method": "lora", "backend": "fsdp", "num_gpus": 1, "max_steps": steps,
            "micro_batch_size": 1, "seq_len": 64}


class BrowserClock:
    """CPU seconds of every Chromium process this one started."""

    def __init__(self) -> None:
        self.me = psutil.Process()

    def cpu_seconds(self) -> float:
        total = 0.0
        for process in self.me.children(recursive=True):
            try:
                if "chrom" in process.name():
                    times = process.cpu_times()
                    total += times.user + times.system
            except psutil.Error:  # a renderer that came and went
                continue
        return total


def newest_step(page) -> int:
    updates = page.evaluate("() => window.__updates")
    return updates[-1][1] if updates else 0


def watch_window(page, clock: BrowserClock, *, until_step: int, timeout_seconds: float) -> dict:
    """From now until the page shows `until_step`: its update stamps and the browser's CPU."""
    start_cpu, start_wall = clock.cpu_seconds(), time.monotonic()
    start_index = len(page.evaluate("() => window.__updates"))
    deadline = start_wall + timeout_seconds
    while newest_step(page) < until_step:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the page did not reach step {until_step} in {timeout_seconds} s "
                               f"(it shows {newest_step(page)})")
        time.sleep(0.2)
    cpu, wall = clock.cpu_seconds() - start_cpu, time.monotonic() - start_wall
    stamps = [stamp for stamp, _ in page.evaluate("() => window.__updates")[start_index:]]
    intervals = [(later - earlier) / 1000 for earlier, later in zip(stamps, stamps[1:])]
    return {"intervals": intervals, "cpu_share": cpu / wall, "seconds": wall}


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else float("nan")


def measure(server, arguments) -> dict[str, dict]:
    from playwright.sync_api import sync_playwright

    job_id = server.submit(job_spec(arguments.steps))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"{server.base_url}/?job={job_id}")
            page.wait_for_selector("#job-status", timeout=60_000)
            page.wait_for_function(
                f"() => (document.querySelector('#job-status').textContent || '')"
                f".includes('Job {job_id}')", timeout=60_000)
            page.evaluate(OBSERVE_HEADLINE_JS)
            clock = BrowserClock()
            budget = arguments.steps * arguments.step_seconds * 3 + 120
            watch_window(page, clock, until_step=1, timeout_seconds=120)
            early = watch_window(page, clock, until_step=arguments.early_steps,
                                 timeout_seconds=budget)
            watch_window(page, clock, until_step=arguments.late_from, timeout_seconds=budget)
            late = watch_window(page, clock, until_step=arguments.steps, timeout_seconds=budget)
            page.screenshot(path=str(Path(tempfile.gettempdir()) / "live-view-late.png"))
            browser.close()
    finally:
        server.http.post(f"/api/jobs/{job_id}/cancel")
        server.wait_for(job_id, FINISHED, timeout_seconds=120)
    return {"early": early, "late": late}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--step-seconds", type=float, default=0.02)
    parser.add_argument("--early-steps", type=int, default=600)
    parser.add_argument("--late-from", type=int, default=3000)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunedeck-live-view-") as home, \
            running_tunedeck(Path(home), cwd=FAKE_TRAINER_DIR, extra_env={
                "FAKE_TRAINER_STEP_SECONDS": str(arguments.step_seconds),
                # The fake `trainer` package has no warm start (trainer.warm_start).
                "TUNEDECK_WARM_START": "false"}) as server:
        windows = measure(server, arguments)
    print(f"{'window':<8} {'updates':>8} {'median s':>9} {'p95 s':>7} {'max s':>7} "
          f"{'browser CPU':>12}")
    for name, window in windows.items():
        intervals = window["intervals"]
        print(f"{name:<8} {len(intervals) + 1:>8} {statistics.median(intervals):>9.2f} "
              f"{p95(intervals):>7.2f} {max(intervals):>7.2f} {window['cpu_share']:>11.0%}")
    early, late = windows["early"], windows["late"]
    print(f"late p95 / {GOAL_SECONDS} s goal: {p95(late['intervals']) / GOAL_SECONDS:.2f}")
    print(f"late / early: p95 interval {p95(late['intervals']) / p95(early['intervals']):.2f}, "
          f"browser CPU {late['cpu_share'] / early['cpu_share']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
