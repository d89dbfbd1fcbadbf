"""bench/gpu_check.sh: its skip without a GPU, and on a CPU behind a stand-in nvidia-smi,
the record it writes (every bench there says it has no CUDA GPU and skips)."""
import os
import subprocess

from tests.bench.bench_modules import BENCH, REPO


def fake_nvidia_smi(folder, script: str) -> dict:
    fake = folder / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def test_gpu_check_skips_cleanly_where_no_gpu_answers(tmp_path):
    env = fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2\nexit 9")
    result = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], capture_output=True,
                            text=True, timeout=60, env={**env, "RESULTS_DIR": str(tmp_path / "r")})
    assert result.returncode == 0 and "no NVIDIA GPU here; skipped" in result.stdout
    assert not (tmp_path / "r").exists()


def test_gpu_check_records_what_it_ran_in_a_dated_markdown_file(tmp_path):
    env = fake_nvidia_smi(tmp_path, 'case "$*" in -L) echo "GPU 0: NVIDIA H200";; '
                                    '*) echo "NVIDIA H200, 143771 MiB, 570.124.06";; esac')
    results = tmp_path / "results"
    result = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], cwd=REPO, capture_output=True,
                            text=True, timeout=300,
                            env={**env, "RESULTS_DIR": str(results), "TUNEDECK_COMMIT": "abc1234",
                                 "GRADIO_ANALYTICS_ENABLED": "False",
                                 # The GPU machine's wheels in ./wheels are not this venv's.
                                 "WHEELS_DIR": str(tmp_path / "no-wheels")})
    assert result.returncode == 0, result.stdout + result.stderr
    [record] = results.glob("*-nvidia-h200.md")
    text = record.read_text()
    assert "- commit: abc1234\n" in text
    assert "## tests/gpu\n\n`5 skipped in " in text
    assert "the throughput cells get " in text
    log = text[text.index("<details>"):]
    for line in ("gpu_throughput: no CUDA GPU here; skipped",
                 "gpu_memory_plan: no CUDA GPU here; skipped"):
        assert line in log and line in result.stdout
    assert f"gpu_check: the record is {results}" in result.stdout
