"""A GPU host may carry only what the worker needs (the GPU machine's image plus the wheels of
`make-wheels.sh --worker`, for bench/gpu_e2e.py): `tunedeck worker`, as it starts and takes
jobs, and what gpu_e2e.py submits and checks with, must load nothing of the web's stack
(run here with those packages made unimportable, as they are there)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.deploy.compose_file import REPO

WEB_PACKAGES = ("gradio", "fastapi", "uvicorn", "starlette", "httpx", "psycopg", "redis")

# Installed before anything else imports. The bench's module is imported first (its
# imports are the submit action, the job page's memory plan and the checks), then the
# worker runs as `tunedeck worker` does, until the test stops it.
WORKER_HOST_PATH = r'''
import atexit
import importlib.util
import sys

BLOCKED = set(sys.argv[1].split(","))


class WebIsNotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, WebIsNotInstalled())


@atexit.register
def say_what_was_loaded():
    loaded = sorted(name for name in sys.modules if name.partition(".")[0] in BLOCKED)
    print(f"web modules loaded: {loaded}", flush=True)


spec = importlib.util.spec_from_file_location("gpu_e2e", "bench/gpu_e2e.py")
bench = sys.modules["gpu_e2e"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
from cli.main import main

sys.exit(main(["worker"]))
'''


@pytest.mark.timeout(180)
def test_the_worker_and_the_gpu_e2e_bench_run_without_the_web_packages(tmp_path):
    log = tmp_path / "worker.log"
    env = {"TUNEDECK_HOME": str(tmp_path / "home"), "TUNEDECK_WARM_START": "false",
           "HOME": str(tmp_path), "GRADIO_ANALYTICS_ENABLED": "False", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-m", "cli", "migrate"], cwd=REPO, env=env,
                   check=True, capture_output=True)
    with log.open("wb") as output:
        worker = subprocess.Popen([sys.executable, "-c", WORKER_HOST_PATH, ",".join(WEB_PACKAGES)],
                                  cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and worker.poll() is None \
                    and " ready." not in log.read_text(errors="replace"):
                time.sleep(0.5)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert " ready." in text, text
    assert "web modules loaded: []" in text, text
