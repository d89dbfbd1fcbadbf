"""bench/markdown_table.py: the rows the GPU benches append to their record."""
import pytest

from tests.bench.bench_modules import load_bench_module

markdown_table = load_bench_module("markdown_table")


def test_a_table_is_a_heading_its_header_then_rows_as_they_come(tmp_path):
    path = tmp_path / "record.md"
    path.write_text("# record\n")
    table = markdown_table.MarkdownTable(path, ["cell", "tokens/s"])
    table.start("Throughput", ("device cpu",))
    table.add(["1b/lora", "53,260"])
    assert path.read_text() == ("# record\n\n## Throughput\n\ndevice cpu\n\n| cell | tokens/s |\n"
                                "| --- | --- |\n| 1b/lora | 53,260 |\n")
    table.add(["8b/full", "failed: a | b\nmore"])
    table.end(("MFU: the method's FLOPs",))
    assert path.read_text().endswith("| 8b/full | failed: a \\| b more |\n\nMFU: the method's FLOPs\n")


def test_a_row_of_the_wrong_width_is_refused_and_no_path_writes_nothing(tmp_path):
    table = markdown_table.MarkdownTable(None, ["a", "b"])
    table.start("nothing")
    table.add(["1", "2"])
    with pytest.raises(ValueError, match="1 values for 2 columns"):
        table.add(["1"])
    assert list(tmp_path.iterdir()) == []
