"""The web image installs the project without the `worker` extra: the base dependencies
must carry the web, the CLI and the migration, and nothing they run may import a module of
the extra (run here with those modules made unimportable, as they are in that image)."""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib

import pytest

from tests.deploy.compose_file import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
WORKER_EXTRA = PYPROJECT["optional-dependencies"]["worker"]
# The libraries a GPU worker needs and the web must never load.
GPU_LIBRARIES = {"torch", "deepspeed", "transformers", "peft", "bitsandbytes", "accelerate",
                 "nvidia-ml-py"}


def distribution_name(requirement: str) -> str:
    """`psycopg[binary]>=3.1` -> `psycopg` (PEP 503 normalised)."""
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def worker_extra_modules() -> set[str]:
    """Top-level modules installed by the `worker` extra's distributions."""
    extra = {distribution_name(requirement) for requirement in WORKER_EXTRA}
    return {module for module, distributions in importlib.metadata.packages_distributions().items()
            if any(distribution_name(name) in extra for name in distributions)}


def test_the_base_dependencies_hold_no_gpu_library():
    base = {distribution_name(requirement) for requirement in PYPROJECT["dependencies"]}
    assert not base & GPU_LIBRARIES
    assert GPU_LIBRARIES <= {distribution_name(requirement) for requirement in WORKER_EXTRA}


def test_the_dev_extra_installs_everything_of_the_worker_extra():
    # `make install` installs `.[dev]`: the test suite runs the worker and the trainer too.
    assert "tunedeck[worker]" in PYPROJECT["optional-dependencies"]["dev"]


# Installed before anything else imports: an import of a blocked module fails exactly as it
# would where the package is not installed.
WEB_IMAGE_PATH = r'''
import sys

BLOCKED = set(sys.argv[1].split(","))


class WorkerExtraIsNotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, WorkerExtraIsNotInstalled())

from fastapi.testclient import TestClient

from cli.main import main

assert main(["migrate"]) == 0
from app.main import create_app

client = TestClient(create_app(with_ui=True))
assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}
plan = client.post("/api/plan", json={"spec": {"model": "builtin:tiny-llama", "max_steps": 2}})
assert plan.status_code == 200, plan.text
job = client.post("/api/jobs", json={"max_steps": 2})
assert job.status_code == 201, job.text
assert client.get(f"/api/jobs/{job.json()['id']}").json()["status"] == "queued"
# No worker: the preflight is stored and sent, and answered at once (the worker computes it).
preflight = client.post("/api/datasets/preflight", json={"seq_len": 64})
assert preflight.status_code == 202 and preflight.json()["status"] == "pending", preflight.text
assert client.get("/").status_code == 200
loaded = sorted(name for name in sys.modules if name.partition(".")[0] in BLOCKED)
assert not loaded, loaded
print("web path ran without the worker extra")
'''


@pytest.mark.timeout(300)
def test_the_web_path_runs_without_the_worker_extra(tmp_path):
    blocked = worker_extra_modules()
    assert {"torch", "deepspeed", "transformers"} <= blocked  # the dev install has them
    result = subprocess.run(
        [sys.executable, "-c", WEB_IMAGE_PATH, ",".join(sorted(blocked))], cwd=REPO,
        capture_output=True, text=True, timeout=280,
        env={"TUNEDECK_HOME": str(tmp_path / "home"), "HOME": str(tmp_path),
             "GRADIO_ANALYTICS_ENABLED": "False", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "web path ran without the worker extra" in result.stdout
