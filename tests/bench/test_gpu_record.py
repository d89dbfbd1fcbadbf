"""bench/gpu_record.py: the dated markdown record of a gpu_check.sh run."""
import datetime
import subprocess
import sys

from tests.bench.bench_modules import BENCH, load_bench_module

gpu_record = load_bench_module("gpu_record")
DEVICE = "NVIDIA H200, 143771 MiB, 570.124.06"
PYTEST_LOG = """ssss.                                                  [100%]
============================= slowest 10 durations =============================
21.30s setup    tests/gpu/test_speed_options_gpu.py::test_liger_kernels_train_as_the_plain_model_does[llama]
4.10s call     tests/gpu/test_speed_options_gpu.py::test_liger_kernels_train_as_the_plain_model_does[llama]
=========================== short test summary info ============================
1 passed, 4 skipped in 31.42s
"""


def test_a_record_is_named_by_day_and_gpu_and_a_second_run_gets_its_own(tmp_path):
    day = datetime.date(2026, 12, 4)
    assert gpu_record.gpu_slug(DEVICE) == "nvidia-h200"
    assert gpu_record.gpu_slug("NVIDIA A100-SXM4-80GB, 81920 MiB, 535") == "nvidia-a100-sxm4-80gb"
    first = gpu_record.record_path(tmp_path, day, DEVICE)
    assert first.name == "2026-12-04-nvidia-h200.md"
    first.write_text("")
    assert gpu_record.record_path(tmp_path, day, DEVICE).name == "2026-12-04-nvidia-h200-2.md"


def test_new_writes_the_date_commit_device_and_versions(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEDECK_COMMIT", "abc1234")
    path = subprocess.run([sys.executable, str(BENCH / "gpu_record.py"), "new", "--results-dir",
                           str(tmp_path / "results"), "--device-line", DEVICE],
                          capture_output=True, text=True, check=True).stdout.strip()
    text = open(path).read()
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    assert path.endswith(f"results/{today}-nvidia-h200.md")
    assert text.startswith(f"# bench/gpu_check.sh on NVIDIA H200, {today}\n")
    assert "- commit: abc1234\n" in text
    assert f"- device (nvidia-smi name, memory, driver): {DEVICE}\n" in text
    versions = next(line for line in text.splitlines() if line.startswith("- versions: "))
    for package in ("python", "torch", "transformers", "peft", "deepspeed", "liger-kernel"):
        assert f" {package} " in versions


def test_the_commit_is_gits_where_there_is_a_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNEDECK_COMMIT", raising=False)
    assert len(gpu_record.git_commit().split()[0]) == 40
    assert gpu_record.git_commit(tmp_path).startswith("unknown (no git checkout here")


def test_the_tests_section_holds_pytests_summary_and_slowest_tests():
    section = gpu_record.tests_section(PYTEST_LOG, exit_code=0)
    assert "`1 passed, 4 skipped in 31.42s` (exit code 0)" in section
    assert "21.30s setup    tests/gpu/" in section and "4.10s call" in section
    assert "short test summary" not in section
    stopped = gpu_record.tests_section("....\n!!! KeyboardInterrupt !!!\n"
                                       "========= 4 passed in 60.02s =========\n", exit_code=124)
    assert "`4 passed in 60.02s (stopped at its time budget)` (exit code 124)" in stopped
    assert "`no summary line` (exit code 1)" in gpu_record.tests_section("", exit_code=1)


def test_the_log_is_appended_folded_away(tmp_path):
    record = tmp_path / "record.md"
    record.write_text("# record\n")
    log = tmp_path / "log.txt"
    log.write_text("```\nrow 1\n")
    gpu_record.main(["log", str(record), str(log)])
    assert record.read_text() == ("# record\n\n<details><summary>Everything gpu_check.sh printed"
                                  "</summary>\n\n~~~~text\n```\nrow 1\n~~~~\n\n</details>\n")
