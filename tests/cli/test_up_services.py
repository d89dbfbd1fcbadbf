"""`tunedeck up` runs the web and a worker and stops both when either ends, saying in its
own log which one ended and how (real child processes)."""
from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading

from cli.services import _wait_for_either


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_killed_worker_stops_the_web_and_is_named_in_the_log(caplog):
    web, worker = _sleeper(), _sleeper()
    worker.send_signal(signal.SIGKILL)
    with caplog.at_level(logging.ERROR, logger="tunedeck.up"):
        returncode = _wait_for_either({"web": web, "worker": worker}, stopping=threading.Event())
    assert returncode == 1
    assert web.poll() is not None  # stopped with it
    assert "the worker exited (killed by SIGKILL): stopping the other service" in caplog.text
    assert "the web exited" not in caplog.text


def test_a_web_that_exits_is_named_with_its_exit_code(caplog):
    web = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    worker = _sleeper()
    with caplog.at_level(logging.ERROR, logger="tunedeck.up"):
        _wait_for_either({"web": web, "worker": worker}, stopping=threading.Event())
    assert worker.poll() is not None
    assert "the web exited (exit code 3)" in caplog.text


def test_being_told_to_stop_is_not_an_error(caplog):
    web, worker = _sleeper(), _sleeper()
    stopping = threading.Event()
    stopping.set()
    with caplog.at_level(logging.ERROR, logger="tunedeck.up"):
        assert _wait_for_either({"web": web, "worker": worker}, stopping=stopping) == 0
    assert web.poll() is not None and worker.poll() is not None
    assert caplog.text == ""


def test_the_default_data_folder_is_made_at_start_up_and_a_named_one_is_left(tmp_path):
    from cli.services import make_default_data_folder
    from tunedeck.settings import Settings

    make_default_data_folder(Settings(home=tmp_path / "var", allowed_roots=None))
    assert (tmp_path / "var" / "data").is_dir()
    named = tmp_path / "admins"
    make_default_data_folder(Settings(home=tmp_path / "other", allowed_roots=str(named)))
    assert not named.exists() and not (tmp_path / "other" / "data").exists()
