"""`python -m trainer.startup.warm_start --ready-file PATH`: a torchrun kept ready by the worker.

A cold launch spends seconds before a rank's first step on imports: torchrun imports torch,
then each rank imports torch, transformers, peft and DeepSpeed again. The worker starts this
process ahead of its next job instead. It imports torchrun's own launcher, starts a
multiprocessing fork server that imports what ranks use (trainer.startup.warm_preload), writes
`--ready-file`, and waits for one line on stdin: the job's torchrun argv, environment,
folder and log file (worker/warm_launcher.py). It writes the line's accept file once it has
taken them on. Then it becomes that torchrun: torchrun's
own argument parser, rendezvous and agent, with the ranks forked from the fork server
(`trainer.startup.warm_rank`) instead of started as `python -m trainer`. The argv in launch.json is
exactly what runs; only how each rank's process comes to exist differs.

It dies with the worker (its death signal), the fork server with it (its pipe closes), and
each rank with the fork server (trainer.rank.die_with_launcher), so nothing outlives the
worker. A closed stdin without a line means "not needed": it exits 0.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from pathlib import Path

from trainer.rank import die_with_launcher

PRELOAD = ["trainer.startup.warm_preload"]


def _nothing() -> None:
    """Forked once at start: returns only after the fork server has finished its imports."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.startup.warm_start")
    parser.add_argument("--ready-file", type=Path, required=True)
    arguments = parser.parse_args(argv)
    die_with_launcher()
    # One thread in the fork server: a forked rank cannot use a parent's OpenMP pool. Each
    # rank sets its own thread count (trainer.startup.warm_rank).
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.distributed.run  # noqa: F401 (imported once here, before the job)

    server_env = dict(os.environ)
    multiprocessing.set_forkserver_preload(PRELOAD)
    ready = multiprocessing.get_context("forkserver").Process(target=_nothing)
    ready.start()
    ready.join()
    arguments.ready_file.parent.mkdir(parents=True, exist_ok=True)
    arguments.ready_file.write_text(str(os.getpid()))

    line = sys.stdin.readline()
    if not line.strip():
        return 0
    launch_with_forked_ranks(json.loads(line), start_method="forkserver", server_env=server_env)
    return 0


def launch_with_forked_ranks(launch: dict, *, start_method: str, server_env: dict[str, str]) -> None:
    """Become the job's launcher (`launch`: its torchrun `argv`, `env`, `cwd` and `log_file`,
    and an `accept_file` to write once taken on) and run torchrun with each rank forked
    (`start_method` "forkserver" from this process's fork server, "fork" from this process
    itself, which must have imported what ranks use) instead of started as `python -m
    trainer`. `server_env` is the environment the forking process had before the agent set
    each rank's variables. Raises torchrun's ChildFailedError when a rank fails."""
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import record

    _take_on_the_job(launch)
    # From here this process is the job's launcher; until the worker reads this file, a
    # failure above leaves the job to a cold launch (worker/warm_launcher.py).
    if launch.get("accept_file"):
        Path(launch["accept_file"]).write_text(str(os.getpid()))
    args = torchrun.parse_args(launch["argv"][1:])
    if not (args.module and args.training_script == "trainer"):
        # Not the trainer (nothing TuneDeck generates): run the command as torchrun would.
        os.execvpe(launch["argv"][0], launch["argv"], launch["env"])
    rank_launch = {"env": launch["env"], "cwd": launch["cwd"], "server_env": server_env,
                   "argv": list(args.training_script_args)}
    from trainer.startup.warm_rank import run_rank

    configure = torchrun.config_from_args

    def forked_ranks(parsed):
        config, _command, _command_args = configure(parsed)
        config.start_method = start_method
        return config, run_rank, [rank_launch]

    torchrun.config_from_args = forked_ranks
    _report_every_killed_rank()
    record(torchrun.run)(args)  # a failed rank raises ChildFailedError: exit 1, as torchrun


def _report_every_killed_rank() -> None:
    """torchrun reports every failed rank of a cold launch, but of forked ranks only the
    first failure it notices: when a rank is SIGKILLed (the kernel's OOM killer, an
    operator), its peers' broken-connection errors may be noticed first, and the kill would
    go unreported. So each rank that had died by a signal before torchrun closed the others
    joins the report, as in a cold launch (worker/failure_triage.py reads it)."""
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext, ProcessFailure

    poll = MultiprocessContext._poll

    def poll_noting_killed_ranks(self):
        exitcodes: dict[int, int | None] = {}
        close = self.close

        def close_after_noting(*args, **kwargs):
            exitcodes.update((rank, process.exitcode)
                             for rank, process in enumerate(self._pc.processes))
            return close(*args, **kwargs)

        self.close = close_after_noting
        try:
            result = poll(self)
        finally:
            del self.close
        if result is not None and result.failures:
            for rank, exitcode in exitcodes.items():
                if exitcode is not None and exitcode < 0 and rank not in result.failures:
                    result.failures[rank] = ProcessFailure(
                        local_rank=rank, pid=self._pc.processes[rank].pid, exitcode=exitcode,
                        error_file=self.error_files[rank])
        return result

    MultiprocessContext._poll = poll_noting_killed_ranks


def _take_on_the_job(launch: dict) -> None:
    """This process's environment, folder and output become the job's launcher's."""
    os.environ.clear()
    os.environ.update(launch["env"])
    os.chdir(launch["cwd"])
    log = os.open(launch["log_file"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)


if __name__ == "__main__":
    sys.exit(main())
