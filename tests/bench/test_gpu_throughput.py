"""bench/gpu_throughput.py's matrix: which cells run first, when the budget stops them, a
cell the plan says does not fit, and (on CPU ranks) the whole path through the real
trainer; bench/gpu_check.sh's skip without a GPU."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gpu_throughput = load_bench_module("gpu_throughput")


def test_the_small_models_four_cells_run_first_then_the_large_models_lora():
    cells = gpu_throughput.ordered_cells(sizes=["1b", "8b"], methods=["lora", "full"],
                                         backends=["zero2", "fsdp"], seq_lens=[2048, 4096],
                                         speeds=["none", "liger"])
    assert len(cells) == 2 * 2 * 2 * 2 * 2
    assert [(cell.size, cell.method, cell.backend, cell.seq_len, cell.speed)
            for cell in cells[:6]] == [
        ("1b", "lora", "zero2", 2048, "none"), ("1b", "lora", "fsdp", 2048, "none"),
        ("1b", "full", "zero2", 2048, "none"), ("1b", "full", "fsdp", 2048, "none"),
        ("8b", "lora", "zero2", 2048, "none"), ("8b", "lora", "fsdp", 2048, "none")]
    assert cells[6] == gpu_throughput.Cell("1b", "lora", "zero2", 2048, "liger")
    assert len(set(cells)) == len(cells)


def test_the_budget_guesses_a_cell_from_its_size_else_twice_the_longest():
    now = [0.0]
    budget = gpu_throughput.Budget(100.0, clock=lambda: now[0])
    assert budget.allows("1b") and budget.guess("1b") == 0.0
    budget.spent("1b", 30.0)
    now[0] = 30.0
    assert budget.guess("1b") == 30.0 and budget.guess("8b") == 60.0
    assert budget.allows("8b")  # 60 s of 70 left
    now[0] = 50.0
    assert budget.allows("1b") and not budget.allows("8b")
    assert gpu_throughput.Budget(None).allows("8b")


def test_a_cell_the_plan_says_does_not_fit_is_skipped_before_any_model_is_built(tmp_path, capsys):
    arguments = gpu_throughput.parse_arguments(["--sizes", "tiny", "--seq-lens", "64",
                                                "--methods", "full", "--backends", "fsdp"])
    cells = gpu_throughput.ordered_cells(sizes=arguments.sizes, methods=arguments.methods,
                                         backends=arguments.backends,
                                         seq_lens=arguments.seq_lens, speeds=arguments.speed)
    gpu_throughput.run_matrix(cells, tmp_path, arguments=arguments, card_bytes=1024)
    row = capsys.readouterr().out.strip()
    assert row.startswith("tiny   full   fsdp       64 none        ")
    assert "skipped: plan says" in row and "GiB > card (0.0 GiB)" in row
    assert not list((tmp_path / "tiny").glob("*.safetensors"))


def test_unknown_sizes_are_refused_by_name():
    with pytest.raises(SystemExit):
        gpu_throughput.parse_arguments(["--sizes", "1b,70b"])
    with pytest.raises(SystemExit):
        gpu_throughput.parse_arguments(["--speed", "none,liger+turbo"])


def test_a_speed_value_sets_its_spec_fields(tmp_path):
    cell = gpu_throughput.Cell("tiny", "full", "fsdp", 64, "liger+fused+flash+padding-free")
    spec = gpu_throughput.cell_spec(cell, tmp_path, steps=3, micro_batch=2)
    assert (spec.kernels, spec.fused_optimizer, spec.attention, spec.padding_free) == \
        ("liger", True, "flash", True)
    plain = gpu_throughput.cell_spec(gpu_throughput.Cell("tiny", "full", "fsdp", 64, "none"),
                                     tmp_path, steps=3, micro_batch=2)
    assert (plain.kernels, plain.fused_optimizer) == ("none", False)


@pytest.mark.torchrun
def test_the_smoke_runs_a_cell_through_the_real_trainer_on_a_cpu():
    result = subprocess.run(
        [sys.executable, "bench/gpu_throughput.py", "--allow-cpu", "--sizes", "tiny",
         "--seq-lens", "64", "--methods", "lora", "--backends", "fsdp", "--speed", "fused"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("tiny "))
    columns = row.split()
    assert columns[:6] == ["tiny", "lora", "fsdp", "64", "fused", "2"]
    assert float(columns[6].replace(",", "")) > 0  # tokens/s
    assert columns[7:10] == ["n/a", "n/a", "n/a"]  # no MFU nor allocator on a CPU


def test_gpu_check_skips_cleanly_where_no_gpu_answers(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    fake.chmod(0o755)
    result = subprocess.run(["bash", str(REPO / "bench" / "gpu_check.sh")], capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert result.returncode == 0 and "no NVIDIA GPU here; skipped" in result.stdout
