"""Trainer launches for the test suite and the benchmarks without paying a cold start's
imports each time.

A cold 2-rank launch on a CPU spends about 8 of its 11 CPU-seconds importing (torchrun
imports torch, then each rank imports torch, transformers, peft and DeepSpeed), several
times what a tiny model's training costs; across the suite's trainer tests that was most of
their time. So each pytest process keeps one of the worker's own warm launchers
(worker/warm_launcher.py, trainer/startup/warm_start.py): it imports once and forks each
launch's torchrun, whose ranks it forks in turn: torchrun's own parser, rendezvous and
agent, the trainer's own `main` on gloo ranks. Only how each process comes to exist differs
from `python -m torch.distributed.run -m trainer`, which the caller still runs for QLoRA
(bitsandbytes stays out of the warm launcher) and for the tests of a cold start itself.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from worker.warm_launcher import WarmLauncher

REPO = Path(__file__).resolve().parent.parent
# Read once as the libraries are imported (huggingface_hub's and datasets' constants): a
# launch that sets them otherwise than the warm launcher's imports saw must start cold.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "DATASETS_")


class TrainerZygote:
    """`run(argv, env=, cwd=, timeout_seconds=)` is `subprocess.run` of a torchrun argv
    (`python -m torch.distributed.run ...` or the `torchrun` script), with stdout and stderr
    together in stdout; it runs cold if the warm launcher cannot take it."""

    def __init__(self, environment: dict[str, str]):
        self._environment = dict(environment)
        self._folder = Path(tempfile.mkdtemp(prefix="trainer-zygote-"))
        self._launcher = WarmLauncher(folder=self._folder, cwd=REPO, environment={
            **environment, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), environment.get("PYTHONPATH")]))})
        self._launcher.replenish()
        self._launches = 0

    def fits(self, env: dict[str, str]) -> bool:
        """Whether a launch with this environment may fork from the warm launcher (see
        IMPORT_TIME_PREFIXES)."""
        names = {name for name in {*env, *self._environment} if name.startswith(IMPORT_TIME_PREFIXES)}
        return all(env.get(name) == self._environment.get(name) for name in names)

    def run(self, argv: list[str], *, env: dict[str, str], cwd: Path,
            timeout_seconds: float) -> subprocess.CompletedProcess:
        # `python -m torch.distributed.run ARGS` or `.../torchrun ARGS`: torchrun's ARGS.
        arguments = argv[3:] if argv[1:3] == ["-m", "torch.distributed.run"] else argv[1:]
        self._launches += 1
        log_file = self._folder / f"launch-{self._launches}.log"
        launcher = self._launcher.take(["torchrun", *arguments], cwd=cwd, env=env, log_file=log_file)
        if launcher is None:
            print(f"the warm launcher could not take a launch (see {self._folder}); it runs cold",
                  file=sys.stderr)
            self._launcher.replenish()
            completed = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                                       timeout=timeout_seconds, start_new_session=True)
            return subprocess.CompletedProcess(argv, completed.returncode,
                                               completed.stdout + completed.stderr, "")
        try:
            returncode = launcher.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(launcher.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            launcher.wait(30)
            raise subprocess.TimeoutExpired(argv, timeout_seconds) from None
        output = log_file.read_text(encoding="utf-8", errors="replace")
        log_file.unlink()
        return subprocess.CompletedProcess(argv, returncode, output, "")

    def close(self) -> None:
        self._launcher.stop()
