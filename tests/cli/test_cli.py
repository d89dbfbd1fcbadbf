"""The `tunedeck` command line: render, bad specs, migrate."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tunedeck(*arguments, cwd=REPO, env=None):
    return subprocess.run([sys.executable, "-m", "cli", *map(str, arguments)], cwd=cwd,
                          capture_output=True, text=True, env=env)


def test_render_writes_spec_config_and_launch(tmp_path):
    result = tunedeck("render", REPO / "examples" / "arithmetic-lora-fsdp.yaml", "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    assert json.loads((run / "fsdp.json").read_text())["mixed_precision"]["reduce_dtype"] == "float32"
    launch = json.loads((run / "launch.json").read_text())
    assert launch["argv"][-2:] == ["--run-dir", str(run)]
    assert f"--run-dir {run}" in result.stdout


def test_bad_spec_file_names_file_and_field(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("max_steps: 3\nlora: {r: -1}\nwarp_speed: 9\n")
    result = tunedeck("render", spec, "--out", tmp_path / "run")
    assert result.returncode != 0
    assert str(spec) in result.stderr and "lora.r:" in result.stderr and "warp_speed:" in result.stderr


def test_missing_spec_file(tmp_path):
    result = tunedeck("render", tmp_path / "nope.yaml", "--out", tmp_path)
    assert result.returncode != 0 and "nope.yaml" in result.stderr


def test_submit_without_a_server_says_where_it_looked(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("max_steps: 3\n")
    result = tunedeck("submit", spec, "--server", "http://127.0.0.1:9")
    assert result.returncode != 0 and "cannot reach TuneDeck at http://127.0.0.1:9" in result.stderr


def test_migrate_creates_the_sqlite_database(tmp_path):
    import os

    result = tunedeck("migrate", env={**os.environ, "TUNEDECK_HOME": str(tmp_path / "home")})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "home" / "tunedeck.db").is_file()


def test_up_refuses_open_access_beyond_loopback_before_a_worker_starts(tmp_path):
    import os
    import socket

    from tunedeck.db.engine import Database
    from tunedeck.db.models import Worker

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, "-m", "cli", "up", "--host", "0.0.0.0", "--port", str(port)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TUNEDECK_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False"})
    assert result.returncode == 1
    assert "refusing to listen on 0.0.0.0" in result.stderr
    database = Database(f"sqlite:///{home / 'tunedeck.db'}")  # migrated, by `up` alone
    with database.transaction() as session:
        assert session.query(Worker).count() == 0  # no worker started
    database.dispose()


def test_worker_concurrency_reaches_the_worker_through_its_settings(tmp_path):
    import os

    environ = {key: value for key, value in os.environ.items()
               if key != "TUNEDECK_WORKER_CONCURRENCY"}
    code = ("import json, os; from celery import Celery; "
            "Celery.worker_main = lambda app, argv: print(json.dumps(argv)); "
            "from cli.main import main; main(['worker', '--concurrency', '3']); "
            "print('TUNEDECK_WORKER_CONCURRENCY' in os.environ)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=120, env={**environ, "TUNEDECK_HOME": str(tmp_path),
                                              "TUNEDECK_WORKER_GPUS": ""})
    assert result.returncode == 0, result.stderr
    argv_line, environ_edited = result.stdout.splitlines()[-2:]
    argv = json.loads(argv_line)
    assert argv[argv.index("--concurrency") + 1] == "4"  # 3 job slots and the preflight thread
    assert environ_edited == "False"
