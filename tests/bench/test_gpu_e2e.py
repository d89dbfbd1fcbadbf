"""bench/gpu_e2e.py: its CPU mode for real (the worker as a subprocess, torchrun, SQLite,
the embedded broker), and its checks on the figures a GPU run stores, which CI cannot make."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder
from tunedeck.units import MIB

REPO = Path(__file__).resolve().parents[2]


def load_bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


e2e_checks = load_bench_module("e2e_checks")
CHECKS = ("job", "device samples", "memory events", "planned vs measured", "mfu", "merged folder")


@pytest.mark.torchrun
@pytest.mark.timeout(300)
def test_the_cpu_mode_runs_one_job_through_the_real_worker_and_passes_every_check(tmp_path):
    markdown = tmp_path / "results.md"
    result = subprocess.run(
        [sys.executable, "bench/gpu_e2e.py", "--cpu", "--markdown", str(markdown)], cwd=REPO,
        capture_output=True, text=True, timeout=280,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split("  ")[0]: line for line in result.stdout.splitlines()
            if line.startswith(CHECKS)}
    assert set(rows) == set(CHECKS), result.stdout
    assert all("  ok  " in row for row in rows.values()), result.stdout
    assert "null in all 50 step rows" in rows["mfu"]  # CPU ranks have no peak FLOPs
    assert "0 GPU rows; " in rows["device samples"]
    assert "gpu_e2e: all 6 checks passed" in result.stdout
    table = markdown.read_text()
    assert table.startswith("\n## bench/gpu_e2e.py, ")
    assert [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| ")
            and " | ok | " in line] == [f"| {name}" for name in CHECKS]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host may have a GPU")
def test_without_a_gpu_and_without_cpu_it_skips_cleanly():
    result = subprocess.run([sys.executable, "bench/gpu_e2e.py"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "no CUDA GPU here; skipped" in result.stdout


def gpu_job(tmp_path, **series) -> "e2e_checks.FinishedJob":
    """A finished job as a GPU run stores it: builtin:tiny-llama's LoRA under FSDP on GPU 0,
    with a peak reserved memory equal to its plan."""
    spec = JobSpec(model="builtin:tiny-llama", backend="fsdp", max_steps=3)
    run = RunFolder(tmp_path)
    run.launch_file.write_text(json.dumps({"argv": [], "env": {"CUDA_VISIBLE_DEVICES": "0"}}))
    planned_mb = e2e_checks.planned_breakdown(spec)[1].total / MIB
    memory = {"rank": 0, "device": "cuda:0", "allocated_mb": 10.0, "reserved_mb": 12.0,
              "peak_mb": 11.0, "peak_reserved_mb": planned_mb, "rss_mb": 900.0}
    defaults = {
        "train": [{"step": step, "tokens_per_second": 50_000.0, "mfu": 0.3, "mfu_6n": 0.4}
                  for step in (1, 2, 3)],
        "memory": [memory],
        "footprint": [{"rank": 0, "params_bytes": 1, "grads_bytes": 1, "optimizer_bytes": 1}],
        "gpus": [{"gpu": 0, "used_mb": 30_000.0, "total_mb": 143_000.0}],
        "processes": [{"rank": 0, "rss_mb": 900.0}],
    }
    return e2e_checks.FinishedJob(status="succeeded", error=None, seconds=10.0, spec=spec,
                                  series={**defaults, **series}, run=run)


def passed(checks) -> dict[str, bool]:
    return {check.name: check.passed for check in checks}


def test_a_gpu_runs_figures_pass_the_gpu_checks(tmp_path):
    job = gpu_job(tmp_path)
    checks = [e2e_checks.device_samples_check(job, on_gpu=True),
              e2e_checks.memory_events_check(job, on_gpu=True),
              e2e_checks.planned_memory_check(job, on_gpu=True),
              e2e_checks.mfu_check(job, on_gpu=True)]
    assert all(check.passed for check in checks), checks
    assert "measured / planned 1.00" in checks[2].found
    assert "median 30.0% (6N 40.0%)" in checks[3].found


def test_each_gpu_check_fails_on_what_it_guards(tmp_path):
    job = gpu_job(tmp_path)
    other_gpu = replace(job, series={**job.series, "gpus": [{"gpu": 1, "used_mb": 1.0,
                                                            "total_mb": 2.0}]})
    assert not e2e_checks.device_samples_check(other_gpu, on_gpu=True).passed
    no_mfu = replace(job, series={**job.series, "train": [{"step": 1, "mfu": None}]})
    assert not e2e_checks.mfu_check(no_mfu, on_gpu=True).passed
    over_one = replace(job, series={**job.series, "train": [{"step": 1, "mfu": 1.7}]})
    assert not e2e_checks.mfu_check(over_one, on_gpu=True).passed
    memory = job.series["memory"][0]
    triple = replace(job, series={**job.series, "memory": [
        {**memory, "peak_reserved_mb": 3 * memory["peak_reserved_mb"]}]})
    assert not e2e_checks.planned_memory_check(triple, on_gpu=True).passed
    cpu_readings = replace(job, series={**job.series, "memory": [
        {**memory, **dict.fromkeys(e2e_checks.ALLOCATOR_FIELDS)}]})
    assert not e2e_checks.memory_events_check(cpu_readings, on_gpu=True).passed


def test_the_cpu_checks_refuse_gpu_figures_and_a_failed_job_says_why(tmp_path):
    job = gpu_job(tmp_path)
    assert not any(passed([e2e_checks.device_samples_check(job, on_gpu=False),
                           e2e_checks.mfu_check(job, on_gpu=False),
                           e2e_checks.memory_events_check(job, on_gpu=False)]).values())
    failed = e2e_checks.job_check(replace(job, status="failed",
                                          error="rank 0: CUDA out of memory\ntraceback"))
    assert not failed.passed and failed.found == "failed: rank 0: CUDA out of memory"
    assert not e2e_checks.merged_folder_check(job.run).passed  # no merged/ in the folder


def test_the_job_gpus_are_looked_up_under_the_indices_the_sampler_stores():
    assert e2e_checks.sampled_gpu_indices("3") == {3}
    assert e2e_checks.sampled_gpu_indices("GPU-aa,GPU-bb") == {0, 1}  # by position
    assert e2e_checks.sampled_gpu_indices(None) == set()
