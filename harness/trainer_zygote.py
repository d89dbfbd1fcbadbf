"""Trainer launches for the test suite without paying a cold start's imports each time.

A cold 2-rank launch on a CPU spends about 8 CPU-seconds importing (torchrun imports torch,
then each rank imports torch, transformers, peft and DeepSpeed), several times what a tiny
model's training costs; across the suite's trainer tests that was most of their time. So
each pytest process keeps one `python -m harness.trainer_zygote`: it imports once what the
worker's warm start preloads (trainer.startup.warm_preload) and forks one child per launch.
The child becomes that launch's torchrun, exactly as the worker's standby does
(trainer.startup.warm_start.launch_with_forked_ranks), with its ranks forked from itself:
torchrun's own parser, rendezvous and agent, the trainer's own `main` on gloo ranks. Only
how each process comes to exist differs from `python -m torch.distributed.run -m trainer`,
which `launch_cold` still runs, for QLoRA (bitsandbytes stays out of the preload) and for
the tests of a cold start itself.

The zygote reads one JSON request a line on stdin and answers on stdout with the child's
pid, then its exit code (negative: the signal that ended it), as `Popen.returncode` would.
It dies with its pytest process, each child with it.
"""
from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Read once as the libraries are imported (huggingface_hub's and datasets' constants): a
# launch that sets them otherwise than the zygote's imports saw must start cold.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "DATASETS_")
ZYGOTE_START_SECONDS = 180


def serve(requests: int, replies: int) -> None:
    """The zygote's loop (no threads: it forks): fork a launcher per request line, report
    each child's pid as it starts and its exit code as it ends."""
    children: dict[int, int] = {}
    pending = b""

    def reply(message: dict) -> None:
        os.write(replies, (json.dumps(message) + "\n").encode())

    while True:
        readable, _, _ = select.select([requests], [], [], 0.05 if children else 1.0)
        if readable:
            chunk = os.read(requests, 1 << 16)
            if not chunk:
                return  # the pytest process is gone or done
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    os.close(replies)
                    os.dup2(os.open(os.devnull, os.O_RDONLY), requests)
                    os._exit(_launcher(request))
                children[pid] = request["id"]
                reply({"id": request["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            reply({"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})


def _launcher(request: dict) -> int:
    """In the forked child: its own session (a timeout kills the launch's whole group),
    then the launch, as the worker's standby runs it."""
    import traceback

    try:
        os.setsid()
        from trainer.rank import die_with_launcher
        from trainer.startup.warm_start import launch_with_forked_ranks

        die_with_launcher()
        launch_with_forked_ranks(request["launch"], start_method="fork",
                                 server_env=request["launch"]["env"])
        return 0
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # torchrun's ChildFailedError among them: exit 1, as torchrun
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


class TrainerZygote:
    """The caller's side: `run(argv, env=, cwd=, timeout_seconds=)` is `subprocess.run` of a
    torchrun argv (`python -m torch.distributed.run ...` or the `torchrun` script), with
    stdout and stderr together in stdout."""

    def __init__(self, environment: dict[str, str]):
        self._environment = dict(environment)
        self._ids = itertools.count()
        self._answers: dict[int, dict] = {}
        self._changed = threading.Condition()
        self._folder = Path(tempfile.mkdtemp(prefix="trainer-zygote-"))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "harness.trainer_zygote"], cwd=REPO,
            env={**environment, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), environment.get("PYTHONPATH")]))},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=(self._folder / "zygote.log").open("ab"), start_new_session=True)
        threading.Thread(target=self._read_answers, daemon=True).start()

    def fits(self, env: dict[str, str]) -> bool:
        """Whether a launch with this environment may fork from the zygote (see
        IMPORT_TIME_PREFIXES)."""
        names = {name for name in {*env, *self._environment} if name.startswith(IMPORT_TIME_PREFIXES)}
        return all(env.get(name) == self._environment.get(name) for name in names)

    def _read_answers(self) -> None:
        for line in self._process.stdout:
            answer = json.loads(line)
            with self._changed:
                self._answers.setdefault(answer["id"], {}).update(answer)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _wait_for(self, request_id: int, key: str, timeout_seconds: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: key in self._answers.get(request_id, {})
                                   or self._process.poll() is not None, timeout_seconds)
            return self._answers.get(request_id, {}).get(key)

    def run(self, argv: list[str], *, env: dict[str, str], cwd: Path,
            timeout_seconds: float) -> subprocess.CompletedProcess:
        # `python -m torch.distributed.run ARGS` or `.../torchrun ARGS`: torchrun's ARGS.
        arguments = argv[3:] if argv[1:3] == ["-m", "torch.distributed.run"] else argv[1:]
        request_id = next(self._ids)
        log_file = self._folder / f"launch-{request_id}.log"
        launch = {"argv": ["torchrun", *arguments], "env": env, "cwd": str(cwd),
                  "log_file": str(log_file)}
        self._process.stdin.write((json.dumps({"id": request_id, "launch": launch}) + "\n").encode())
        self._process.stdin.flush()
        pid = self._wait_for(request_id, "pid", ZYGOTE_START_SECONDS)
        if pid is None:
            raise RuntimeError(f"the trainer zygote did not fork a launcher (exit code "
                               f"{self._process.poll()}); see {self._folder / 'zygote.log'}")
        returncode = self._wait_for(request_id, "exit", timeout_seconds)
        if returncode is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._wait_for(request_id, "exit", 30)
            raise subprocess.TimeoutExpired(argv, timeout_seconds)
        output = log_file.read_text(encoding="utf-8", errors="replace")
        log_file.unlink()
        return subprocess.CompletedProcess(argv, returncode, output, "")

    def close(self) -> None:
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()


def main() -> None:
    # Answers go on a copy of stdout; what the imports print goes to stderr (the log).
    replies = os.dup(1)
    os.dup2(2, 1)
    # One thread while importing: a forked child cannot use a parent's OpenMP pool.
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.distributed.run  # noqa: F401 (each launch's torchrun)

    import trainer.startup.warm_preload  # noqa: F401 (what every rank imports; dies with pytest)

    serve(sys.stdin.fileno(), replies)


if __name__ == "__main__":
    main()
