"""Stands in for `trainer.train` in the out-of-memory end-to-end test: rank 1 allocates until
the host refuses (a real MemoryError, under an address-space limit the rank sets on itself so
the test never takes the machine's memory); the other ranks wait to be stopped by torchrun.
The real `trainer.__main__` turns the MemoryError into the trainer's error notice."""
import os
import resource
import time

ALLOCATION_BYTES = 16 * 1024 * 1024
HEADROOM_BYTES = 256 * 1024 * 1024
FAILING_RANK = 1


def train(spec, run, *, context, telemetry, resume=False):
    telemetry.notice("training started (the out-of-memory test's trainer)")
    if context.rank != FAILING_RANK:
        time.sleep(600)
        return
    limit = _address_space_bytes() + HEADROOM_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    held = []
    try:
        while True:
            held.append(bytearray(ALLOCATION_BYTES))
    except MemoryError:
        held.clear()  # let the error notice be written: the traceback keeps this frame alive
        raise


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
