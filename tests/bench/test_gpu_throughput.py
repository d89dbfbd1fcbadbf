"""bench/gpu_throughput.py: which cells run and in what order (a matrix, or cells by name),
when the budget stops them, a cell the plan says does not fit, and (on CPU ranks) the
whole path through the real trainer: a cell that runs, one that fails saying why, the
markdown record."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.bench_modules import BENCH, REPO, load_bench_module

gpu_throughput = load_bench_module("gpu_throughput")
gpu_cells = load_bench_module("gpu_cells")
Cell = gpu_cells.Cell
# What bench/gpu_check.sh runs: issue 28's measured rows, then the full 8B.
GPU_CHECK_CELLS = [
    "1b/lora/zero2/2048/none", "1b/lora/fsdp/2048/none", "1b/full/zero2/2048/none",
    "1b/full/fsdp/2048/none", "1b/lora/zero2/2048/liger", "1b/lora/fsdp/2048/liger",
    "1b/lora/zero2/2048/dpo", "1b/lora/zero2/512/grpo@16",
    "8b/lora/zero2/2048/none", "8b/lora/fsdp/2048/none", "8b/lora/fsdp/4096/liger@2",
    "8b/full/fsdp/4096/liger+ckpt+fused@2", "8b/full/zero2/4096/liger+ckpt+fused@2",
    "8b/full/fsdp/4096/liger+ckpt@2"]


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
    assert cells[6] == Cell("1b", "lora", "zero2", 2048, "liger")
    assert len(set(cells)) == len(cells)


def test_cells_by_name_run_in_their_order_with_their_micro_batch():
    arguments = gpu_throughput.parse_arguments(
        ["--cells", "8b/full/fsdp/4096/liger+ckpt+fused@2, 1b/lora/zero2/2048/none"])
    assert gpu_throughput.chosen_cells(arguments) == [
        Cell("8b", "full", "fsdp", 4096, "liger+ckpt+fused", 2),
        Cell("1b", "lora", "zero2", 2048, "none")]
    assert arguments.cells[0].text == "8b/full/fsdp/4096/liger+ckpt+fused@2"
    # The cell's own micro-batch wins over --micro-batch, which wins over the size's default.
    assert gpu_throughput.micro_batch_of(arguments.cells[0], 8) == 2
    assert gpu_throughput.micro_batch_of(arguments.cells[1], 8) == 8
    assert gpu_throughput.micro_batch_of(arguments.cells[1], None) == 16384 // 2048


@pytest.mark.parametrize("cells, named", [
    ("70b/lora/zero2/2048/none", "unknown size '70b'"),
    ("1b/dpo/zero2/2048/none", "unknown method 'dpo'"),
    ("1b/lora/zero3/2048/none", "unknown backend 'zero3'"),
    ("1b/lora/zero2/long/none", "seq_len 'long' is not a whole number"),
    ("1b/lora/zero2/2048/liger+turbo", "unknown speed option turbo"),
    ("1b/lora/zero2/2048/none@two", "micro-batch 'two' is not a whole number"),
    ("1b/lora/zero2/2048", "a cell is size/method/backend/seq_len/speed[@micro_batch]")])
def test_a_cell_with_an_unknown_part_is_refused_naming_it(cells, named, capsys):
    with pytest.raises(SystemExit):
        gpu_throughput.parse_arguments(["--cells", f"1b/lora/fsdp/2048/none,{cells}"])
    assert named in capsys.readouterr().err


def test_gpu_checks_cells_are_issue_28s_rows_then_the_full_8b():
    arguments = gpu_throughput.parse_arguments(["--cells-file", str(BENCH / "gpu_check_cells.txt")])
    assert [cell.text for cell in arguments.cells] == GPU_CHECK_CELLS
    assert "--cells-file \"$CELLS_FILE\"" in (BENCH / "gpu_check.sh").read_text()


def test_a_bad_cells_file_is_refused_naming_the_line(tmp_path, capsys):
    cells_file = tmp_path / "cells.txt"
    cells_file.write_text("# comment\n1b/lora/zero2/2048/none\n1b/lora/zero2/2048/warp\n")
    with pytest.raises(SystemExit):
        gpu_throughput.parse_arguments(["--cells-file", str(cells_file)])
    assert "--cells-file: '1b/lora/zero2/2048/warp': unknown speed option warp" in \
        capsys.readouterr().err


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
    assert budget.refusal("8b") == "not started: 50 s of the budget left, a cell takes about 60 s"
    # A cell whose model is still to be built needs that time too.
    assert not budget.allows("1b", extra_seconds=25)
    assert budget.refusal("1b", extra_seconds=25).endswith("a cell takes about 55 s")
    assert gpu_throughput.Budget(None).allows("8b")


def test_a_cell_the_plan_says_does_not_fit_is_skipped_before_any_model_is_built(tmp_path, capsys):
    arguments = gpu_throughput.parse_arguments(["--cells", "tiny/full/fsdp/64/none"])
    table = gpu_throughput.MarkdownTable(tmp_path / "record.md", gpu_throughput.COLUMNS)
    gpu_throughput.run_matrix(arguments.cells, tmp_path, arguments=arguments, card_bytes=1024,
                              table=table)
    row = capsys.readouterr().out.strip()
    assert row.startswith("tiny   full   fsdp       64 none               2 skipped: plan says")
    assert row.endswith("GiB > card (0.0 GiB)")
    assert not list((tmp_path / "tiny").glob("*.safetensors"))
    markdown = (tmp_path / "record.md").read_text()
    assert "| tiny | full | fsdp | 64 | none | 2 | skipped: plan says" in markdown
    assert " (> card) |" in markdown


def test_a_cell_the_job_spec_refuses_is_a_row_saying_why_and_the_next_cell_follows(tmp_path,
                                                                                  capsys):
    arguments = gpu_throughput.parse_arguments(
        ["--cells", "tiny/qlora/fsdp/64/none,tiny/full/fsdp/64/none"])
    gpu_throughput.run_matrix(arguments.cells, tmp_path, arguments=arguments, card_bytes=1024)
    refused, skipped = capsys.readouterr().out.strip().splitlines()
    assert refused.startswith("tiny   qlora  fsdp       64 none               2 refused by the "
                              "job spec: Value error, qlora under fsdp:")
    assert "\n" not in refused and "skipped: plan says" in skipped


def test_a_speed_value_sets_its_spec_fields(tmp_path):
    cell = Cell("tiny", "full", "fsdp", 64, "liger+fused+flash+padding-free+ckpt")
    spec = gpu_throughput.cell_spec(cell, tmp_path, steps=3, micro_batch=2)
    assert (spec.kernels, spec.fused_optimizer, spec.attention, spec.padding_free) == \
        ("liger", True, "flash", True)
    assert spec.fsdp.activation_checkpointing and not spec.zero2.activation_checkpointing
    zero2 = gpu_throughput.cell_spec(Cell("tiny", "full", "zero2", 64, "ckpt"), tmp_path,
                                     steps=3, micro_batch=2)
    assert zero2.zero2.activation_checkpointing and zero2.kernels == "none"
    plain = gpu_throughput.cell_spec(Cell("tiny", "full", "fsdp", 64, "none"),
                                     tmp_path, steps=3, micro_batch=2)
    assert (plain.kernels, plain.fused_optimizer, plain.fsdp.activation_checkpointing) == \
        ("none", False, False)


def test_unknown_sizes_and_speed_options_are_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        gpu_throughput.parse_arguments(["--sizes", "1b,70b"])
    assert "--sizes: unknown 70b" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_throughput.parse_arguments(["--speed", "none,liger+turbo"])
    assert "--speed: unknown turbo" in capsys.readouterr().err


@pytest.mark.torchrun
def test_the_smoke_runs_cells_through_the_real_trainer_and_a_failed_one_says_why(tmp_path):
    """On a CPU, Liger's kernels are refused by the trainer itself: a real failure."""
    record = tmp_path / "record.md"
    result = subprocess.run(
        [sys.executable, "bench/gpu_throughput.py", "--allow-cpu", "--markdown", str(record),
         "--cells", "tiny/lora/fsdp/64/fused,tiny/lora/fsdp/64/liger"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("tiny ")]
    columns = rows[0].split()
    assert columns[:6] == ["tiny", "lora", "fsdp", "64", "fused", "2"]
    assert float(columns[6].replace(",", "")) > 0  # tokens/s
    assert columns[7:11] == ["n/a"] * 4  # no MFU nor allocator on a CPU
    assert rows[1].split()[:7] == ["tiny", "lora", "fsdp", "64", "liger", "2", "failed:"]
    cause = "an error on rank 0: ValueError: kernels liger: needs a CUDA GPU"
    assert cause in rows[1] and "exited" not in rows[1]
    # The failing rank's whole notice, on stderr.
    assert "gpu-tiny-lora-fsdp-s64-liger failed: rank 0: ValueError: kernels liger:" in \
        result.stderr
    lines = record.read_text().splitlines()
    assert lines[:2] == ["", "## Throughput (bench/gpu_throughput.py)"]
    assert "| model | method | backend | seq | speed | mb | tokens/s | MFU | MFU 6N | " \
           "allocated GiB | reserved GiB | planned GiB | meas/plan |" in lines
    table_rows = [line for line in lines if line.startswith("| tiny |")]
    assert table_rows[0].startswith("| tiny | lora | fsdp | 64 | fused | 2 | ")
    assert table_rows[1].startswith(f"| tiny | lora | fsdp | 64 | liger | 2 | failed: {cause}")


@pytest.mark.torchrun
def test_a_cell_whose_dataset_the_trainer_refuses_names_the_record(tmp_path, capsys):
    cell = gpu_cells.parse_cell("tiny/lora/fsdp/64/none@2")
    cells = gpu_throughput.CellFolder(tmp_path)
    spec = gpu_throughput.cell_spec(cell, tmp_path, steps=2, micro_batch=2)
    cells.model_shape("tiny")
    cells.prepare(spec, "tiny")
    Path(spec.dataset).write_text('{"question": "no answer"}\n' * 8)
    result = gpu_throughput.run_cell(spec, cells, predicted_bytes=2**30, card_bytes=2**34,
                                     timeout_seconds=300)
    assert result.measured is None
    assert result.outcome.startswith(
        "failed: a model or dataset file is missing or malformed on rank 0: ValueError: "
        f"dataset {spec.dataset}: record 1 has keys ['question']")
    assert f"{spec.name} failed: rank 0: ValueError: dataset" in capsys.readouterr().err
    assert not (tmp_path / spec.name).exists()  # read before the cell's folder went


@pytest.mark.torchrun
def test_a_cell_the_plan_refuses_runs_with_run_unplanned_and_says_so(tmp_path, capsys):
    arguments = gpu_throughput.parse_arguments(["--cells", "tiny/lora/fsdp/64/none",
                                                "--run-unplanned", "--steps", "2"])
    gpu_throughput.run_matrix(arguments.cells, tmp_path, arguments=arguments, card_bytes=1024)
    row = capsys.readouterr().out.strip()
    assert float(row.split()[6].replace(",", "")) > 0  # it ran: tokens/s
    assert row.endswith("(plan says 0.0 GiB > card (0.0 GiB); run anyway)")


def test_a_grpo_cell_samples_half_rows_in_groups_and_reports_its_split(tmp_path):
    spec = gpu_throughput.cell_spec(Cell("1b", "lora", "zero2", 512, "grpo"), tmp_path, steps=5,
                                    micro_batch=16)
    assert spec.objective == "grpo" and spec.grpo.num_generations == 8
    assert spec.grpo.max_completion_length == 256 and spec.grpo.reward_columns == ()
    assert gpu_throughput.cell_spec(Cell("1b", "lora", "zero2", 512, "grpo"), tmp_path, steps=5,
                                    micro_batch=6).grpo.num_generations == 6
    steps = [{"completion_length": 100.0, "sampling_seconds": 2.0, "scoring_seconds": 0.01,
              "training_seconds": 0.5, "tokens": 4000}] * 3
    split = gpu_throughput.grpo_split(steps, rows=16)
    assert split["sampled_tokens_per_second"] == 800.0
    assert split["trained_tokens_per_second"] == 8000.0
    line = gpu_throughput.grpo_line(Cell("1b", "lora", "zero2", 512, "grpo", 16),
                                    gpu_throughput.CellResult(1.0, 2.0, measured={"grpo": split}))
    assert line.startswith("  1b/lora/zero2/512/grpo@16 grpo: 800 tokens sampled/s, 8,000 "
                           "trained tokens/s; a step 2.00 s sampling")
