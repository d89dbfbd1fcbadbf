"""A rank forked from its warm launcher: the same `trainer.__main__.main` a cold
rank runs, after taking on the environment and folder its job was launched with.

The warm launcher was started before the job existed, so the process inherits its
environment; torchrun's agent then set the rank's own variables (RANK, WORLD_SIZE,
MASTER_ADDR, ...). The job's environment replaces the first and keeps the second.
"""
from __future__ import annotations

import ctypes
import os
import sys
import traceback
from typing import Any

# Set for the warm launcher and a job's launcher only; a rank's environment drops them.
# (Here, not there: the launcher imports this module, and must not import that one.)
PRELOAD_ONLY_VARIABLES = ("PYTORCH_NVML_BASED_CUDA_CHECK", "TORCHDYNAMO_DISABLE")
# A forked rank's /proc/PID/environ is still the warm launcher's (a process's environment
# there is what it was exec'd with), so it names itself "td-rank<RANK>" for the worker's
# sampler (worker/sampler.py) to tell the ranks apart.
RANK_PROCESS_NAME_PREFIX = "td-rank"
PR_SET_NAME = 15


def run_rank(launch: dict[str, Any]) -> int:
    """`launch`: the job's `env`, `cwd` and trainer `argv`, and `server_env`, the
    environment its launcher had before the agent set the rank's (what the agent set is
    what differs)."""
    server_env = launch["server_env"]
    set_by_agent = {key: value for key, value in os.environ.items()
                    if server_env.get(key) != value and key not in PRELOAD_ONLY_VARIABLES}
    os.environ.clear()
    os.environ.update(launch["env"])
    os.environ.update(set_by_agent)
    os.chdir(launch["cwd"])
    _take_default_signal_handling()
    _name_this_process(RANK_PROCESS_NAME_PREFIX + os.environ.get("RANK", ""))
    _share_the_cores()
    from trainer.__main__ import main

    try:
        return main(launch["argv"])
    except BaseException:
        # Into this rank's own log, as a cold rank's interpreter would print it: torchrun's
        # wrapper undoes the log redirection before the exception leaves it.
        traceback.print_exc()
        sys.stderr.flush()
        raise


def _take_default_signal_handling() -> None:
    """A rank forked from its launcher itself (start method "fork") inherits the agent's
    handlers, which turn SIGTERM into a Python exception; a cold rank's interpreter has the
    defaults, under which a SIGTERM from torchrun (a peer failed) ends the rank quietly
    instead of writing a second, misleading error notice."""
    import signal

    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _name_this_process(name: str) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _share_the_cores() -> None:
    """The warm launcher ran torch on one thread (see trainer.startup.warm_preload); this rank takes
    its job's OMP_NUM_THREADS, or what trainer.rank.set_cpu_threads would give it."""
    import torch

    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
        return
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world_size)))
