"""Issue 30: the trainer a job runs is the one installed, whatever folder the worker was
started in. A `trainer/` package in the working folder (a user's own project) would come
first on `sys.path` for `python -m trainer` (a rank) and `python -m trainer.…` (the worker's
helpers); the ranks' environment and the helpers' argv keep that folder off it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trainer
from tunedeck.spec.job_spec import JobSpec
from tunedeck.services.line_server import installed_module
from tunedeck.settings import Settings
from worker.launch import launch_environment

INSTALLED = Path(trainer.__file__).resolve()
WHERE = "import trainer; print(trainer.__file__)"


def _decoy_project(folder: Path) -> Path:
    (folder / "trainer").mkdir()
    (folder / "trainer" / "__init__.py").write_text("raise SystemExit('decoy')\n")
    return folder


def _imported_trainer(argv: list[str], *, cwd: Path, env: dict[str, str]) -> Path:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip()).resolve()


def test_a_rank_imports_the_installed_trainer_from_a_folder_holding_another(tmp_path):
    project = _decoy_project(tmp_path)
    spec = JobSpec.model_validate({"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic",
                                 "max_steps": 1})
    ranks = {**os.environ, **launch_environment(spec, Settings(home=tmp_path / "home"))}
    without = {key: value for key, value in ranks.items() if key != "PYTHONSAFEPATH"}
    # Python's own rule, which the environment overrides: the folder comes first.
    assert subprocess.run([sys.executable, "-c", WHERE], cwd=project, env=without,
                          capture_output=True, text=True, timeout=60).returncode != 0
    assert _imported_trainer([sys.executable, "-c", WHERE], cwd=project, env=ranks) == INSTALLED


def test_the_workers_helpers_run_the_installed_trainer(tmp_path):
    project = _decoy_project(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONSAFEPATH"}
    argv = installed_module("trainer.model.target_preview", "--serve")  # answers until stdin closes
    done = subprocess.run(argv, cwd=project, env=env, input="", capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "decoy" not in done.stderr, done.stderr
