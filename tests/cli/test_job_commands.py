"""What `tunedeck jobs`, `status`, `watch` and `download` print and unpack, from answers
shaped as the HTTP API's."""
import io
import zipfile

import pytest

from cli.download_command import UnsafeEntry, unpack_zip
from cli.job_commands import jobs_table, status_text
from cli.text_table import text_table
from cli.watch_command import LinePrinter, progress_bar, watch_line

SPEC = {"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic", "method": "lora",
        "backend": "zero2", "num_gpus": 2, "num_nodes": 1, "precision": "bf16", "max_steps": 100}


def test_a_text_table_pads_columns_and_right_aligns_numbers():
    assert text_table(["ID", "NAME"], [["7", "short"], ["123", "a longer name"]],
                      right_aligned=["ID"]).splitlines() == [
        " ID  NAME", "  7  short", "123  a longer name"]


def test_the_jobs_table_shows_status_method_step_and_loss():
    rows = [{"id": 12, "name": "arith", "status": "running", "spec": SPEC,
             "latest": {"step": 40, "loss": 1.234567, "tokens_per_second": 900.0},
             "updated_at": "2026-12-03T06:41:51.123+00:00"},
            {"id": 3, "name": "waiting", "status": "queued", "spec": {**SPEC, "method": "full",
                                                                      "backend": "fsdp"},
             "latest": None, "updated_at": None},
            {"id": 4, "name": "prefs", "status": "queued",
             "spec": {**SPEC, "objective": "dpo"}, "latest": None, "updated_at": None}]
    assert jobs_table(rows).splitlines() == [
        "ID  NAME     STATUS   METHOD              STEP    LOSS  UPDATED",
        "12  arith    running  lora/zero2      40 / 100  1.2346  2026-12-03 06:41:51",
        " 3  waiting  queued   full/fsdp        - / 100       -  -",
        " 4  prefs    queued   dpo lora/zero2   - / 100       -  -"]
    assert jobs_table([]) == "no jobs"


def test_status_shows_the_spec_progress_eta_error_and_downloads():
    train = [{"step": step, "time": 100.0 + step, "loss": 2.0 - step / 100,
              "tokens_per_second": 1500.0} for step in range(1, 41)]
    job = {"id": 12, "name": "arith", "status": "running", "spec": SPEC, "error": None,
           "created_at": "2026-12-03T06:00:00+00:00", "artifacts": {}}
    text = status_text(job, train)
    assert text.splitlines()[0] == "job 12  arith  running"
    assert "builtin:tiny-llama · dataset builtin:arithmetic" in text
    assert "lora · zero2 · 2 GPUs x 1 node · bf16" in text
    assert "step 40 / 100 · loss 1.6000 · 1,500 tokens/s · ETA 1m 00s" in text  # 60 x 1 s
    assert "downloads none yet" in " ".join(text.split()) and "tags" not in text
    tagged = status_text({**job, "spec": {**SPEC, "tags": ["baseline", "qwen"]}}, train)
    assert "tags      #baseline #qwen" in tagged
    failed = status_text({**job, "status": "failed", "error": "CUDA out of memory",
                          "failure_kind": "oom", "artifacts": {
                              "adapter": {"dtype": "F32", "bytes": 2_500_000, "files": 3}}}, train)
    assert "ETA" not in failed and "CUDA out of memory (oom)" in failed
    assert "adapter (F32, 2.5 MB, 3 files)" in failed


def test_status_says_cpu_ranks_and_why_a_finished_job_has_no_downloads():
    job = {"id": 5, "name": "cpu", "status": "cancelled", "spec": SPEC, "worker_host": "h",
           "gpu_indices": [], "artifacts": {}}
    text = " ".join(status_text(job, []).split())
    assert "lora · zero2 · 2 CPU ranks x 1 node · bf16" in text  # a worker without GPUs took it
    dpo = " ".join(status_text({**job, "spec": {**SPEC, "objective": "dpo"}}, []).split())
    assert "training dpo lora · zero2 · 2 CPU ranks" in dpo
    assert "downloads none: the job was cancelled" in text and "none yet" not in text
    failed = " ".join(status_text({**job, "status": "failed"}, []).split())
    assert "downloads none: the job failed" in failed
    # Not yet claimed: nothing says CPU; one GPU, two nodes.
    queued = " ".join(status_text({**job, "status": "queued", "worker_host": None,
                                   "gpu_indices": None,
                                   "spec": {**SPEC, "num_gpus": 1, "num_nodes": 2}}, []).split())
    assert "1 GPU x 2 nodes" in queued and "downloads none yet" in queued


def test_the_watch_line_has_a_bar_of_steps_and_the_eta():
    assert progress_bar(40, 100) == "[########------------]  40%"
    assert progress_bar(5, None) == "[--------------------]    "
    assert progress_bar(150, 100).endswith("100%")
    train = [{"step": step, "time": float(step) * 2, "loss": 1.0, "tokens_per_second": 10.0}
             for step in range(1, 11)]
    job = {"id": 7, "status": "running", "spec": SPEC}
    assert watch_line(job, {"train": train}) == (
        "[##------------------]  10% job 7 running · step 10 / 100 · loss 1.0000 · "
        "10 tokens/s · ETA 3m 00s")
    phase = {"phase": "tokenize", "state": "progress", "done": 500, "total": 2000,
             "unit": "records", "elapsed": 3.0}
    assert watch_line(job, {"train": [], "phase": [phase]}).startswith("[#####---------------]  25% ")


def _zip(path, names):
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, f"contents of {name}")
    return path


def test_download_unpacks_the_zip_without_its_top_folder(tmp_path):
    archive = _zip(tmp_path / "merged.zip", ["merged/config.json", "merged/sub/model.safetensors"])
    assert unpack_zip(archive, tmp_path / "out", top_folder="merged") == 2
    assert (tmp_path / "out" / "config.json").read_text() == "contents of merged/config.json"
    assert (tmp_path / "out" / "sub" / "model.safetensors").is_file()


@pytest.mark.parametrize("evil", ["../escape.txt", "merged/../../escape.txt", "/etc/escape.txt",
                                  "C:/escape.txt", "merged\\..\\..\\escape.txt"])
def test_download_refuses_a_zip_whose_entry_leaves_the_folder(tmp_path, evil):
    archive = _zip(tmp_path / "evil.zip", ["merged/config.json", evil])
    with pytest.raises(UnsafeEntry, match="leaves the folder"):
        unpack_zip(archive, tmp_path / "out" / "inner", top_folder="merged")
    assert not (tmp_path / "out").exists()  # refused before anything was written
    assert not list(tmp_path.rglob("escape.txt"))


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_watch_redraws_one_line_on_a_terminal_and_appends_lines_elsewhere():
    terminal = _Terminal()
    printer = LinePrinter(terminal)
    for line in ("job 7 queued", "job 7 queued", "job 7 running"):
        printer.show(line)
    printer.close()
    assert terminal.getvalue() == "\rjob 7 queued\x1b[K\rjob 7 running\x1b[K\n"
    pipe = io.StringIO()
    printer = LinePrinter(pipe)
    for line in ("job 7 queued", "job 7 queued", "job 7 running"):
        printer.show(line)
    printer.close()
    lines = pipe.getvalue().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["job 7 queued", "job 7 running"]
