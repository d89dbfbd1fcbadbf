"""A client that asks a set of routes again and again from a thread while an outage is on:
every (route, status) it saw and its longest answer, for the outage tests to assert on."""
from __future__ import annotations

import threading
import time
from collections import Counter

import httpx

# The bound on any answer during an outage.
LONGEST_ANSWER_SECONDS = 30


def job_routes(job_id: int) -> list[str]:
    """The routes a page, the CLI or a script reads while a job runs."""
    return ["/healthz", "/api/jobs", f"/api/jobs/{job_id}", f"/api/jobs/{job_id}/metrics",
            f"/api/jobs/{job_id}/logs", f"/api/jobs/{job_id}/events", "/api/workers",
            "/metrics", "/"]


class OutageProbe:
    def __init__(self, base_url: str, routes: list[str], *, headers: dict | None = None):
        self.routes = routes
        self.client = httpx.Client(base_url=base_url, timeout=LONGEST_ANSWER_SECONDS + 10,
                                   headers={"Accept": "application/json", **(headers or {})})
        self.during = threading.Event()
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for route in self.routes:
                started = time.monotonic()
                status = self.client.get(route).status_code
                if self.during.is_set():
                    self.statuses[(route, status)] += 1
                    self.longest = max(self.longest, time.monotonic() - started)
            time.sleep(0.3)

    def summary(self) -> str:
        return (f"{dict(sorted(self.statuses.items()))}; longest answer "
                f"{self.longest:.2f} s")

    def __enter__(self) -> "OutageProbe":
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(timeout=LONGEST_ANSWER_SECONDS + 15)
        self.client.close()
