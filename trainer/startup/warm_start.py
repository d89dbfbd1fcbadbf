"""`python -m trainer.startup.warm_start --ready-file PATH`: the worker's warm launcher.

A cold launch spends seconds before a rank's first step on imports: torchrun imports torch,
then each rank imports torch, transformers, peft and DeepSpeed again (about 8 CPU-seconds
of a tiny 2-rank CPU job's 11). The worker starts this process once instead. It imports
torchrun's own launcher and what ranks use (trainer.startup.warm_preload), writes
`--ready-file`, and then serves every job that fits a warm start: for each JSON line on
stdin (the job's torchrun argv, environment, folder, log file and accept file:
worker/warm_launcher.py) it forks a child that becomes that job's torchrun: torchrun's own
argument parser, rendezvous and agent, with each rank forked from it
(`trainer.startup.warm_rank`) instead of started as `python -m trainer`. The argv in
launch.json is exactly what runs; only how each process comes to exist differs. It answers
on stdout with each child's pid as it forks it and its exit code (negative: the signal
that ended it) as it reaps it.

The imports are paid once a worker, not once a job, and jobs at once on disjoint GPUs
both start warm. It dies with the worker (its death signal), each launcher with it, and
each rank with its launcher (trainer.rank.die_with_launcher), so nothing outlives the
worker. A closed stdin means "no more jobs": it exits once its launchers have.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import sys
from pathlib import Path

from trainer.rank import die_with_launcher

# Set in the launcher, not its ranks (trainer.startup.warm_rank drops it): torch asks NVML
# whether CUDA is there instead of creating a context, which a forked rank could not use.
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.startup.warm_start")
    parser.add_argument("--ready-file", type=Path, required=True)
    arguments = parser.parse_args(argv)
    die_with_launcher()
    # Answers go on a copy of stdout; what the imports or a child print goes to stderr.
    replies = os.dup(1)
    os.dup2(2, 1)
    # One thread while importing: a forked launcher or rank cannot use a parent's OpenMP
    # pool. Each rank sets its own thread count (trainer.startup.warm_rank).
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.distributed.run  # noqa: F401 (each job's torchrun)

    import trainer.startup.warm_preload  # noqa: F401 (what every rank imports)

    arguments.ready_file.parent.mkdir(parents=True, exist_ok=True)
    arguments.ready_file.write_text(str(os.getpid()))
    serve(sys.stdin.fileno(), replies)
    return 0


def serve(requests: int, replies: int) -> None:
    """Fork a launcher for each request line, report each child's pid as it starts and its
    exit code as it ends. No thread here: this process forks."""
    children: dict[int, int] = {}  # pid -> request id
    pending = b""
    open_requests = True

    def reply(message: dict) -> None:
        os.write(replies, (json.dumps(message) + "\n").encode())

    while open_requests or children:
        if open_requests:
            readable = select.select([requests], [], [], 0.05 if children else 1.0)[0]
        else:  # no more jobs: wait for the running ones
            readable = select.select([], [], [], 0.05)[0]
        if readable:
            chunk = os.read(requests, 1 << 16)
            open_requests = bool(chunk)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    os.close(replies)
                    os.dup2(os.open(os.devnull, os.O_RDONLY), requests)
                    os._exit(_launcher(request["launch"]))
                children[pid] = request["id"]
                reply({"id": request["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            reply({"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})


def _launcher(launch: dict) -> int:
    """In the forked child: a session of its own (a cancel signals the job's whole group),
    its death tied to this server's, then the job, as torchrun's exit code."""
    import traceback

    try:
        os.setsid()
        die_with_launcher()
        launch_with_forked_ranks(launch)
        return 0
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # torchrun's ChildFailedError among them: exit 1, as torchrun
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def launch_with_forked_ranks(launch: dict) -> None:
    """Become the job's launcher (`launch`: its torchrun `argv`, `env`, `cwd` and `log_file`,
    and an `accept_file` to write once taken on) and run torchrun with each rank forked from
    this process, which has imported what ranks use, instead of started as `python -m
    trainer`. Raises torchrun's ChildFailedError when a rank fails."""
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import record

    _take_on_the_job(launch)
    os.environ[NVML_CHECK] = "1"
    # What a rank inherits before the agent sets its own variables (warm_rank tells them apart).
    server_env = dict(os.environ)
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
        config.start_method = "fork"
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
