"""Fixtures for the trainer's tests: one built-in model cache for the whole session, and a
helper that lays out a real run folder and launches real torchrun CPU ranks on it."""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.trainer_zygote import TrainerZygote

from tunedeck.launch_config import backend_config, build_torchrun_argv
from tunedeck.spec.job_spec import JobSpec
from tunedeck.metrics.events import decode_event
from tunedeck.run_folder import RunFolder, read_json, write_run_folder
from tunedeck.torch_extensions import environment_extensions_dir
from worker.warm_launcher import fits_warm_start

RANKS = 2
RUN_TIMEOUT_SECONDS = 300
# Small and fast on a 2-core CPU, while the loss still falls clearly.
BASE_SPEC = {
    "model": "builtin:tiny-llama", "dataset": "builtin:arithmetic", "num_gpus": RANKS,
    "max_steps": 36, "learning_rate": 5e-3, "micro_batch_size": 4, "seq_len": 64,
    "precision": "bf16",
}


@pytest.fixture(scope="session")
def tunedeck_home(tmp_path_factory) -> Path:
    """One `$TUNEDECK_HOME` per session, so the built-in model is generated once."""
    home = tmp_path_factory.mktemp("tunedeck-home")
    previous = os.environ.get("TUNEDECK_HOME")
    os.environ["TUNEDECK_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("TUNEDECK_HOME", None)
    else:
        os.environ["TUNEDECK_HOME"] = previous


@pytest.fixture(scope="session")
def builtin_model_dir(tunedeck_home) -> Path:
    from trainer.model.builtin_model import ensure_builtin_model

    return ensure_builtin_model(tunedeck_home)


@pytest.fixture(scope="session")
def builtin_tokenizer(builtin_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(builtin_model_dir)


@dataclass
class TrainerRun:
    run: RunFolder
    ranks: int
    returncode: int
    output: str
    seconds: float

    def events(self, rank: int) -> list[dict]:
        lines = self.run.rank_metrics_file(rank).read_text(encoding="utf-8").splitlines()
        return [event for event in map(decode_event, lines) if event is not None]

    def events_of_kind(self, rank: int, kind: str) -> list[dict]:
        return [event for event in self.events(rank) if event["kind"] == kind]


def write_run(run_dir: Path, **spec_overrides) -> RunFolder:
    """The run folder exactly as the worker lays it out, with the real generated config."""
    spec = JobSpec.model_validate({**BASE_SPEC, **spec_overrides})
    run = RunFolder(run_dir)
    write_run_folder(
        run, spec_json=spec.model_dump(mode="json"), backend=spec.backend,
        backend_config=backend_config(spec),
        launch={"argv": build_torchrun_argv(spec, str(run_dir)), "environment": {}},
    )
    return run


def torchrun_command(run: RunFolder, *extra_arguments: str, ranks: int = RANKS) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(ranks), "-m", "trainer", "--run-dir", str(run.path),
            *extra_arguments]


def trainer_environment(tunedeck_home: Path) -> dict[str, str]:
    return {
        **os.environ, "OMP_NUM_THREADS": "1", "TUNEDECK_HOME": str(tunedeck_home),
        "TORCH_EXTENSIONS_DIR": str(environment_extensions_dir()),
    }


def run_process_group(argv: list[str], *, env: dict[str, str], timeout_seconds: float,
                      cwd: Path | None = None) -> subprocess.CompletedProcess:
    """subprocess.run in a session of its own, the whole group killed on a timeout: a hung
    torchrun's ranks would otherwise outlive it and slow every later test."""
    import signal

    with subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


_ZYGOTE: list[TrainerZygote] = []


def trainer_zygote() -> TrainerZygote:
    """This pytest process's zygote, started at its first launch (its imports take seconds)."""
    if not _ZYGOTE:
        _ZYGOTE.append(TrainerZygote(os.environ.copy()))
        atexit.register(_ZYGOTE[0].close)
    return _ZYGOTE[0]


def launch_trainer(run: RunFolder, tunedeck_home: Path, *extra_arguments: str,
                   ranks: int = RANKS, timeout_seconds: float = RUN_TIMEOUT_SECONDS,
                   environment: dict[str, str] | None = None, cold: bool = False) -> TrainerRun:
    """`ranks` must match the spec's num_gpus (DeepSpeed checks its batch size against it);
    `environment` overrides the ranks' variables. The launch is forked from this session's
    trainer zygote (harness/trainer_zygote.py says why), or with `cold` (and always for a
    spec the worker would launch cold, or a hub cache of the test's own) started as
    `python -m torch.distributed.run`."""
    import time

    started = time.monotonic()
    argv = torchrun_command(run, *extra_arguments, ranks=ranks)
    env = {**trainer_environment(tunedeck_home), **(environment or {})}
    spec = JobSpec.model_validate(read_json(run.spec_file))
    if cold or not fits_warm_start(spec) or not trainer_zygote().fits(env):
        completed = run_process_group(argv, env=env, cwd=run.path, timeout_seconds=timeout_seconds)
    else:
        completed = trainer_zygote().run(argv, env=env, cwd=run.path, timeout_seconds=timeout_seconds)
    return TrainerRun(run=run, ranks=ranks, returncode=completed.returncode,
                      output=(completed.stdout + completed.stderr)[-6000:],
                      seconds=time.monotonic() - started)


@pytest.fixture
def run_trainer(tmp_path, tunedeck_home, builtin_model_dir):
    """run_trainer(*arguments, **spec_overrides) -> TrainerRun, after a real 2-rank launch."""
    def run_it(*extra_arguments: str, **spec_overrides) -> TrainerRun:
        run = write_run(tmp_path / "run", **spec_overrides)
        return launch_trainer(run, tunedeck_home, *extra_arguments)

    return run_it


@pytest.fixture
def start_trainer(tmp_path, tunedeck_home, builtin_model_dir):
    """start_trainer(**spec_overrides) -> (RunFolder, Popen): a launch left running, in its
    own session as the worker starts it; killed at teardown if still alive."""
    launched = []

    def start(**spec_overrides):
        run = write_run(tmp_path / "run", **spec_overrides)
        launcher = subprocess.Popen(torchrun_command(run), env=trainer_environment(tunedeck_home),
                                    cwd=run.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
        launched.append(launcher)
        return run, launcher

    yield start
    for launcher in launched:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def run_probe(probe: Path, model_dir: Path, report_file: Path, tunedeck_home: Path):
    """Run a probe script on RANKS torchrun ranks; it writes `report_file` (JSON), returned."""
    import json

    completed = run_process_group(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
         str(RANKS), str(probe), str(model_dir), str(report_file)],
        env=trainer_environment(tunedeck_home), timeout_seconds=RUN_TIMEOUT_SECONDS)
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-6000:]
    return json.loads(report_file.read_text())
