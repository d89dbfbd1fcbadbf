"""The `tunedeck` command line: render, bad specs, migrate."""
import json
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[3]


def tunedeck(*arguments, cwd=REPO, env=None):
    return subprocess.run([sys.executable, "-m", "tunedeck.cli", *map(str, arguments)], cwd=cwd,
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
