"""bench/trainer_runs.py's reading of a failed run: the ranks' error notices and torchrun's
output judged by the worker's triage, on metrics files written as the trainer writes them;
and a real run under torchrun that times out."""
import json

import pytest

from tests.bench.bench_modules import load_bench_module
from tunedeck.run_folder import RunFolder

trainer_runs = load_bench_module("trainer_runs")

# torch's own text, as trainer/failure_notice.py wraps it on a GPU rank.
TORCH_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
             "139.81 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process "
             "has 138.68 GiB memory in use. Of the allocated memory 131.20 GiB is allocated by "
             "PyTorch, and 5.62 GiB is reserved by PyTorch but unallocated.")
OOM_NOTICE = f"out of memory on rank 0 (allocated 131.20 GB, reserved 138.00 GB): " \
             f"OutOfMemoryError: {TORCH_OOM}"
TORCHRUN_REPORT = """[rank0]: torch.OutOfMemoryError: CUDA out of memory.
E1204 torch/distributed/elastic/multiprocessing/api.py failed (exitcode: 1)
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4242)
"""


def write_events(run: RunFolder, rank: int, *events: dict) -> None:
    run.metrics_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"rank": rank, **event}) for event in events]
    run.rank_metrics_file(rank).write_text("\n".join(["not json", *lines]) + "\n")


def test_an_out_of_memory_names_the_rank_and_the_allocators_figures(tmp_path):
    run = RunFolder(tmp_path)
    write_events(run, 0, {"kind": "step", "time": 1.0, "step": 3},
                 {"kind": "notice", "time": 5.0, "level": "error", "message": OOM_NOTICE})
    # A peer's broken connection comes first in time: the symptom, not the cause.
    write_events(run, 1, {"kind": "notice", "time": 4.0, "level": "info", "message": "hello"},
                 {"kind": "notice", "time": 4.5, "level": "error",
                  "message": "DistBackendError: Connection closed by peer"})
    failure = trainer_runs.run_failure(run, returncode=1, output=TORCHRUN_REPORT,
                                       timed_out_after=None)
    assert failure.cause == ("out of memory on rank 0: allocated 131.20 GB, reserved 138.00 GB; "
                             "Tried to allocate 2.00 GiB; total capacity of 139.81 GiB of "
                             "which 1.12 GiB is free")
    assert failure.notice == f"rank 0: {OOM_NOTICE}"
    assert str(failure).splitlines()[0] == failure.cause and not failure.timed_out


def test_a_run_that_left_no_notice_is_judged_from_torchruns_output(tmp_path):
    failure = trainer_runs.run_failure(RunFolder(tmp_path), returncode=1,
                                       output="some line\n" + TORCHRUN_REPORT,
                                       timed_out_after=None)
    assert failure.cause.startswith("out of memory on rank 0")
    assert failure.notice == "" and "Root Cause" in str(failure)
    silent = trainer_runs.run_failure(RunFolder(tmp_path), returncode=1, output="nothing\n",
                                      timed_out_after=None)
    assert silent.cause == "an error (torchrun exited 1; no rank wrote an error notice)"


def test_a_timeout_says_how_far_the_run_got(tmp_path):
    run = RunFolder(tmp_path)
    write_events(run, 0, {"kind": "phase", "time": 1.0, "phase": "load_shards", "state": "start",
                          "done": None, "total": None, "unit": None, "elapsed": 0.0,
                          "message": None},
                 {"kind": "phase", "time": 2.0, "phase": "compile_ops", "state": "progress",
                  "done": None, "total": None, "unit": None, "elapsed": 25.0, "message": None})
    failure = trainer_runs.run_failure(run, returncode=-15, output="", timed_out_after=30)
    assert failure.cause == "timed out after 30 s before the first step (last: compiling ops · 25 s)"
    assert failure.timed_out
    write_events(run, 1, {"kind": "step", "time": 3.0, "step": 6},
                 {"kind": "step", "time": 4.0, "step": 7})
    assert trainer_runs.run_failure(run, returncode=-15, output="",
                                    timed_out_after=30).cause == "timed out after 30 s at step 7"
    empty = RunFolder(tmp_path / "empty")
    assert trainer_runs.run_failure(empty, returncode=-15, output="", timed_out_after=30).cause \
        == "timed out after 30 s before any step was recorded"


def test_a_rank_that_failed_and_then_hung_is_judged_by_its_notice(tmp_path):
    run = RunFolder(tmp_path)
    write_events(run, 1, {"kind": "notice", "time": 5.0, "level": "error",
                          "message": "RuntimeError: loss became nan at step 4"})
    failure = trainer_runs.run_failure(run, returncode=-15, output="", timed_out_after=60)
    assert failure.cause == ("the loss became NaN on rank 1: RuntimeError: loss became nan at "
                             "step 4; the run then hung until its timeout (60 s)")
    assert failure.notice == "rank 1: RuntimeError: loss became nan at step 4"


@pytest.mark.torchrun
def test_a_real_run_past_its_timeout_is_stopped_and_says_so(tmp_path):
    gpu_throughput = load_bench_module("gpu_throughput")
    cell = gpu_throughput.parse_cells("tiny/lora/fsdp/64/none")[0]
    spec = gpu_throughput.cell_spec(cell, tmp_path, steps=2, micro_batch=2)
    cells = gpu_throughput.CellFolder(tmp_path)
    cells.model_shape("tiny")
    cells.prepare(spec, "tiny")
    # FSDP: a ZeRO-2 rank stopped while DeepSpeed compiles its ops leaves their lock behind.
    with pytest.raises(trainer_runs.TrainerFailed) as raised:
        trainer_runs.run_plain_torchrun(tmp_path / "home", spec, tmp_path / "run", metrics=True,
                                        timeout_seconds=2, stop_after_summary=True)
    assert raised.value.timed_out
    assert raised.value.cause.startswith("timed out after 2 s ")
