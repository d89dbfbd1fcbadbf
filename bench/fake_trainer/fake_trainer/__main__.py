"""`python -m fake_trainer --run-dir RUN [--metrics on|off] [--resume]`, the benches' fake.

Each rank appends a "step" line stamped with `time.time()` to its own metrics file every
`FAKE_TRAINER_STEP_SECONDS` (default 0.1 s), forever, and exits cleanly on SIGTERM (as the
worker's cancel sends it). No model, no torch: twenty of these run on a laptop.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from tunedeck.metrics.events import NOTICE, STEP, encode_event
from tunedeck.run_folder import RunFolder


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m fake_trainer")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--metrics", choices=("on", "off"), default="on")
    parser.add_argument("--resume", action="store_true")
    arguments = parser.parse_args()
    stop_requested = []
    signal.signal(signal.SIGTERM, lambda _signal, _frame: stop_requested.append(True))
    rank = int(os.environ.get("RANK", "0"))
    step_seconds = float(os.environ.get("FAKE_TRAINER_STEP_SECONDS", "0.1"))
    path = RunFolder(arguments.run_dir.resolve()).rank_metrics_file(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as metrics:
        metrics.write(encode_event(NOTICE, rank=rank, time=time.time(), level="info",
                                   message="training started (the freshness bench's fake trainer)"))
        metrics.flush()
        step = 0
        while not stop_requested:
            step += 1
            metrics.write(encode_event(STEP, rank=rank, time=time.time(), step=step, loss=1.0 / step,
                                       learning_rate=1e-3, grad_norm=1.0, tokens_per_second=1000.0,
                                       step_seconds=step_seconds, tokens=512))
            metrics.flush()
            time.sleep(step_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
