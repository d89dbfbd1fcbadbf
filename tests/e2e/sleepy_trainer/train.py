"""Stands in for `trainer.train` in the data preflight end-to-end test: the job says it
started, then holds its worker's only job slot until it is cancelled."""
import time


def train(spec, run, *, context, telemetry, resume=False):
    telemetry.notice("training started (the preflight test's trainer: it only waits)")
    time.sleep(600)
