"""bench/gpu_memory_plan.py: a cell that fails is a row with its cause and the rest run on
(the real trainer under torchrun, on a CPU); the rows' text and markdown."""
import pytest

from tests.bench.bench_modules import load_bench_module

gpu_memory_plan = load_bench_module("gpu_memory_plan")
random_llama = load_bench_module("random_llama")
markdown_table = load_bench_module("markdown_table")
TINY = ["--hidden", "64", "--layers", "2", "--heads", "4", "--intermediate", "128",
        "--vocab", "0", "--allow-cpu"]


def test_a_measured_row_shows_both_peaks_and_their_errors():
    text = gpu_memory_plan.row_text(["full/fsdp/s2048/ckpt", "40.00", "36.00", "46.00",
                                     "+15.0%", "-10.0%"])
    assert text.split() == ["full/fsdp/s2048/ckpt", "40.00", "36.00", "46.00", "+15.0%", "-10.0%"]
    assert gpu_memory_plan.COLUMNS[2:4] == ["allocated GB", "reserved GB"]


def test_unknown_checkpointing_values_are_refused(capsys):
    with pytest.raises(SystemExit):
        gpu_memory_plan.parse_arguments(["--checkpointing", "sometimes"])
    assert "--checkpointing: unknown sometimes" in capsys.readouterr().err


@pytest.mark.torchrun
def test_a_failed_cell_is_a_row_with_its_cause_and_the_next_cell_runs(tmp_path, capsys):
    arguments = gpu_memory_plan.parse_arguments(
        [*TINY, "--seq-lens", "64", "--methods", "lora", "--backends", "fsdp",
         "--checkpointing", "off,on", "--steps", "2", "--micro-batch", "2"])
    random_llama.build_random_llama(tmp_path / "model", random_llama.shape_from_arguments(arguments))
    (tmp_path / "rows.jsonl").write_text('{"question": "no answer"}\n' * 8)
    table = markdown_table.MarkdownTable(tmp_path / "record.md", gpu_memory_plan.COLUMNS)
    worst = gpu_memory_plan.run_cells(tmp_path, arguments, budget=gpu_memory_plan.Budget(None),
                                      table=table)
    captured = capsys.readouterr()
    # (DeepSpeed, which transformers imports to build the model, warns on stdout.)
    rows = [line for line in captured.out.splitlines() if line.startswith("lora/")]
    assert [row.split()[0] for row in rows] == ["lora/fsdp/s64/no-ckpt", "lora/fsdp/s64/ckpt"]
    for row in rows:
        assert "failed: a model or dataset file is missing or malformed on rank 0: ValueError: " \
               "dataset" in row
    assert captured.err.count("failed: rank 0: ValueError: dataset") == 2
    assert worst == 0.0
    markdown = (tmp_path / "record.md").read_text().splitlines()
    assert [line.split(" | ")[0] for line in markdown] == ["| lora/fsdp/s64/no-ckpt",
                                                           "| lora/fsdp/s64/ckpt"]
