"""The failure classifier on realistic texts: torchrun's failure report, the trainer's
error notices, PyTorch's and NCCL's own messages."""
import pytest

from tunedeck.jobs.failure_kinds import failure_label
from worker.failure_triage import FailureEvidence, classify_failure, describe_failure, parse_rank_exits

TORCHRUN_SIGKILL_REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
=======================================================
trainer FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_17:48:10
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 30935)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 30935
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_17:48:10
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 30936)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 30936
=======================================================
"""

TORCHRUN_EXCEPTION_REPORT = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/main/trainer/train.py", line 200, in stop_on_non_finite_loss
[rank1]: FloatingPointError: loss became nan at step 5; lower the learning rate, or use bf16 (fp16 overflows)
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_17:50:01
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
"""

CUDA_OOM = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
            "capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this "
            "process has 77.93 GiB memory in use.")
GLOO_PEER_CLOSED = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                    "Connection closed by peer [127.0.0.1]:29500")
NCCL_WATCHDOG = ("DistBackendError: [Rank 0] Watchdog caught collective operation timeout: "
                 "WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=1, Timeout(ms)=600000) ran for "
                 "600012 milliseconds before timing out.")


def classify(**evidence):
    return classify_failure(FailureEvidence(**evidence))


def test_the_trainers_out_of_memory_notice_names_rank_and_memory():
    reason = classify(returncode=1, error_notices=(
        (10.0, 1, "out of memory on rank 1 (allocated 70.10 GB, reserved 78.00 GB): " + CUDA_OOM),))
    assert (reason.kind, reason.rank) == ("out_of_memory", 1)
    assert "allocated 70.10 GB, reserved 78.00 GB" in reason.detail
    assert "Tried to allocate 2.00 GiB" in reason.detail
    assert reason.label == "out of memory (rank 1)"


def test_host_memory_error_and_errno_12_are_out_of_memory():
    assert classify(error_notices=((1.0, 0, "out of memory on rank 0: MemoryError: "),)).kind == \
        "out_of_memory"
    cpu = ("out of memory on rank 0: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
           "DefaultCPUAllocator: can't allocate memory: you tried to allocate 40000000000 bytes. "
           "Error code 12 (Cannot allocate memory)")
    assert classify(error_notices=((1.0, 0, cpu),)).detail == "you tried to allocate 40000000000 bytes"
    log = "[default1]:OSError: [Errno 12] Cannot allocate memory\n"
    reason = classify(returncode=1, log_tail=log)
    assert (reason.kind, reason.rank) == ("out_of_memory", 1)


def test_out_of_memory_beats_an_earlier_peer_timeout():
    """The rank that ran out of memory is the cause; its peer's timeout only the symptom."""
    reason = classify(returncode=1, error_notices=((5.0, 0, NCCL_WATCHDOG),
                                                   (6.0, 1, "out of memory on rank 1: " + CUDA_OOM)))
    assert (reason.kind, reason.rank) == ("out_of_memory", 1)


@pytest.mark.parametrize("message", [NCCL_WATCHDOG, GLOO_PEER_CLOSED, "RuntimeError: NCCL timeout",
                                     "RuntimeError: [gloo] Timed out waiting 1800000ms for recv "
                                     "operation to complete"])
def test_nccl_and_gloo_timeouts(message):
    reason = classify(returncode=1, error_notices=((3.0, 0, message),))
    assert (reason.kind, reason.rank) == ("comm_timeout", 0)


def test_nan_loss_from_the_notice_or_from_the_log():
    notice = "FloatingPointError: loss became nan at step 5; lower the learning rate"
    assert classify(returncode=1, error_notices=((2.0, 0, notice),)).kind == "nan_loss"
    reason = classify(returncode=1, log_tail=TORCHRUN_EXCEPTION_REPORT)
    assert (reason.kind, reason.rank) == ("nan_loss", 1)


def test_input_errors_from_preflight_and_from_the_trainer():
    reason = classify(input_problems=("dataset /data/train.jsonl: no such file",))
    assert reason.kind == "input_error" and "/data/train.jsonl" in reason.detail
    notice = "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.jsonl'"
    assert classify(returncode=1, error_notices=((1.0, 1, notice),)).kind == "input_error"
    malformed = "ValueError: dataset /data/qa.jsonl: record 3 is not JSON"
    assert classify(returncode=1, error_notices=((1.0, 0, malformed),)).kind == "input_error"
    # A ValueError that names no file is not the input's fault.
    assert classify(returncode=1, error_notices=((1.0, 0, "ValueError: bad shape 3"),)).kind == "error"


def test_a_hub_id_not_cached_on_an_offline_host_is_its_own_kind_not_an_input_error():
    checked = ("model org/absent: not in this host's Hugging Face cache (/hf/hub), and "
               "HF_HUB_OFFLINE=1 forbids downloading it: fill the cache first (...)")
    reason = classify(input_problems=(checked,))
    assert (reason.kind, reason.detail) == ("not_cached_offline", checked)
    # A rank that meets one: transformers' words, with a path that reads as an input error.
    notice = ("OSError: We couldn't connect to 'https://huggingface.co' to load the files, and "
              "couldn't find them in the cached files. Check /root/.cache/huggingface/hub")
    assert classify(returncode=1, error_notices=((1.0, 0, notice),)).kind == "not_cached_offline"


def test_a_sigkilled_rank_is_killed_by_signal_not_its_peers_broken_connection():
    reason = classify(returncode=1, error_notices=((4.0, 0, GLOO_PEER_CLOSED),),
                      log_tail=TORCHRUN_SIGKILL_REPORT)
    assert (reason.kind, reason.rank, reason.detail) == ("killed_by_signal", 1, "SIGKILL")


def test_torchruns_own_sigterm_of_survivors_is_not_a_kill():
    exits = parse_rank_exits(TORCHRUN_SIGKILL_REPORT)
    assert [(e.rank, e.exitcode, e.signal_name, e.root_cause) for e in exits] == [
        (0, -15, "SIGTERM", False), (1, -9, "SIGKILL", True)]
    assert classify(returncode=1, log_tail=TORCHRUN_EXCEPTION_REPORT.replace(
        "FloatingPointError: loss became nan", "KeyError: 'x'")).kind == "error"


def test_the_launcher_killed_by_a_signal():
    reason = classify(returncode=-9)
    assert (reason.kind, reason.rank) == ("killed_by_signal", None)
    assert "SIGKILL" in reason.detail


def test_cancel_and_shutdown_and_anything_else():
    assert classify(cancelled=True, returncode=-15).kind == "cancelled"
    assert classify(stopped_by_shutdown=True, returncode=-15).kind == "worker_lost"
    reason = classify(returncode=1, error_notices=((1.0, 1, "KeyError: 'lm_head'"),))
    assert (reason.kind, reason.rank) == ("error", 1)
    assert classify(returncode=0).kind == "error"


def test_labels_and_descriptions():
    assert failure_label("comm_timeout", None) == "comm timeout"
    assert failure_label(None, 1) == ""
    reason = classify(returncode=1, log_tail=TORCHRUN_SIGKILL_REPORT)
    assert describe_failure(reason) == "failure: killed by a signal on rank 1: SIGKILL"


# A full disk in the words of what met it (captured on a tmpfs that filled up, torch 2.13):
# torch.distributed.checkpoint's save as the trainer's notice gives it (its first and last
# lines; the traceback between them is torch's own frames), torch.save's zip writer, Python,
# and safetensors (what save_pretrained writes merged/ with).
DCP_FULL_DISK_NOTICE = (
    "CheckpointException: CheckpointException ranks:dict_keys([0])\n"
    "Traceback (most recent call last): (RANK 0)\n"
    '  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 854, in __exit__\n'
    "    self.file_like.write_end_of_file()\n"
    "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598\n")
TORCH_SAVE_FULL_DISK = ("RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos "
                        "576 vs 534")
TORCH_STREAM_WRITER = ("RuntimeError: PytorchStreamWriter failed writing file data/0: file write "
                       "failed")
PYTHON_FULL_DISK = ("OSError: [Errno 28] No space left on device: "
                    "'/var/tunedeck/runs/job-7/metrics/rank-0.jsonl'")
SAFETENSORS_FULL_DISK = ("SafetensorError: Error while serializing: I/O error: No space left on "
                         "device (os error 28)")
DISK_WORDS = ("the disk under /var/tunedeck/runs/job-7 is full (0.9 MB free): free space, lower "
              "keep_checkpoints, or move TUNEDECK_HOME")


@pytest.mark.parametrize("message", [DCP_FULL_DISK_NOTICE, TORCH_SAVE_FULL_DISK,
                                     TORCH_STREAM_WRITER, PYTHON_FULL_DISK, SAFETENSORS_FULL_DISK],
                         ids=["dcp", "torch.save", "stream-writer", "python", "safetensors"])
def test_every_word_for_a_full_disk_names_the_disk_and_its_free_space(message):
    # Plenty of room by now (the job's folder was cleared): the notice alone decides.
    reason = classify(returncode=1, error_notices=((3.0, 1, message),),
                      run_dir="/var/tunedeck/runs/job-7", free_bytes=900_000)
    assert (reason.kind, reason.rank, reason.detail) == ("disk_full", 1, DISK_WORDS)
    assert reason.label == "disk full (rank 1)"
    assert describe_failure(reason) == f"failure: the disk filled up on rank 1: {DISK_WORDS}"


def test_a_full_disk_beats_an_earlier_peer_timeout_and_is_no_input_error():
    reason = classify(returncode=1, free_bytes=10**12, error_notices=(
        (1.0, 0, GLOO_PEER_CLOSED), (2.0, 1, PYTHON_FULL_DISK)))
    assert (reason.kind, reason.rank) == ("disk_full", 1)


def test_a_full_disk_that_swallowed_every_notice_is_named_by_the_room_left():
    # The ranks' notices and torchrun's log are on that disk: nothing may have been written.
    reason = classify(returncode=1, run_dir="/runs/job-3", free_bytes=4096)
    assert (reason.kind, reason.rank) == ("disk_full", None)
    assert reason.detail.startswith("the disk under /runs/job-3 is full (0.0 MB free): ")
    # With room, the same silence is an error like any other.
    assert classify(returncode=1, run_dir="/runs/job-3", free_bytes=10**10).kind == "error"
    assert classify(returncode=1).kind == "error"  # free space not measured


def test_torchruns_log_says_the_disk_filled_when_no_notice_did():
    report = "Root" + TORCHRUN_EXCEPTION_REPORT.split("Root", 1)[1]  # torchrun's, no notice
    log_tail = ("[rank0]:   File \"/venv/lib/python3.11/site-packages/torch/serialization.py\"\n"
                f"[rank0]: {TORCH_SAVE_FULL_DISK}\n{report}")
    reason = classify(returncode=1, log_tail=log_tail, free_bytes=10**10, run_dir="/runs/job-4")
    assert reason.kind == "disk_full"
    assert "(10,000.0 MB free)" in reason.detail


def test_out_of_memory_first_is_still_out_of_memory_on_a_nearly_full_disk():
    notice = ("out of memory on rank 1 (allocated 70.10 GB, reserved 78.00 GB): "
              "OutOfMemoryError: CUDA out of memory.")
    reason = classify(returncode=1, error_notices=((1.0, 1, notice),), free_bytes=0)
    assert reason.kind == "out_of_memory"



def test_torch_saving_to_a_real_full_disk_says_it_in_words_the_triage_knows(tmp_path):
    """The words above, from torch itself now: torch.save onto a 256 KB tmpfs."""
    from harness.small_disk import mount_problem, small_disk

    if mount_problem():
        pytest.skip(mount_problem())
    import torch

    with small_disk(tmp_path / "disk", 256 * 1024) as disk:
        with pytest.raises(RuntimeError) as raised:
            torch.save(torch.zeros(1_000_000), disk.path / "t.pt")
        free_bytes = disk.free_bytes
    message = f"{type(raised.value).__name__}: {raised.value}"
    reason = classify(returncode=1, error_notices=((1.0, 0, message),), free_bytes=free_bytes,
                      run_dir=str(tmp_path / "disk"))
    assert reason.kind == "disk_full", message
