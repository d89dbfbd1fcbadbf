"""The trainer's error notice: out of memory names the rank and, on a GPU, its allocator."""
import torch

from trainer.failure_notice import accelerator_memory_reading, error_notice


def test_a_gpu_out_of_memory_names_the_rank_and_the_memory_it_had():
    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
    notice = error_notice(error, rank=1, memory_reading=lambda: (70.1e9, 78e9))
    assert notice == ("out of memory on rank 1 (allocated 70.10 GB, reserved 78.00 GB): "
                      "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")


def test_a_host_memory_error_names_the_rank():
    notice = error_notice(MemoryError(), rank=0, memory_reading=accelerator_memory_reading(
        torch.device("cpu")))
    assert notice == "out of memory on rank 0: MemoryError: "


def test_a_real_memory_error_under_an_address_space_limit(tmp_path):
    """The real trainer's handling, in a child with a tight RLIMIT_AS (never this process's)."""
    import subprocess
    import sys

    script = (
        "import resource, torch\n"
        "from trainer.failure_notice import error_notice, accelerator_memory_reading\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))\n"
        "try:\n    bytearray(8 << 30)\n"
        "except MemoryError as error:\n"
        "    print(error_notice(error, rank=3, memory_reading=accelerator_memory_reading(torch.device('cpu'))))\n")
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True).stdout
    assert output.startswith("out of memory on rank 3: MemoryError")


def test_other_errors_are_their_type_and_message():
    assert error_notice(ValueError("bad"), rank=0, memory_reading=lambda: None) == "ValueError: bad"


def test_torchs_cpu_allocator_failure_is_out_of_memory_too():
    try:
        torch.empty(1 << 50, dtype=torch.uint8)  # a petabyte: refused at once, nothing touched
    except RuntimeError as error:
        notice = error_notice(error, rank=2, memory_reading=lambda: None)
    assert notice.startswith("out of memory on rank 2: RuntimeError: ")
    assert "can't allocate memory" in notice
