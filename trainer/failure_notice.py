"""The error notice a rank writes as it fails: the exception, and for running out of memory
the rank and, on a GPU, what its allocator held at that moment, so the dashboard can say
"out of memory on rank 1 (allocated 70.10 GB, reserved 78.00 GB)"."""
from __future__ import annotations

from typing import Callable

import torch

from tunedeck.units import GB

MemoryReading = Callable[[], "tuple[float, float] | None"]


def error_notice(error: BaseException, *, rank: int, memory_reading: MemoryReading) -> str:
    """`memory_reading()` gives (allocated, reserved) bytes, or None where no allocator
    counts them (a CPU rank)."""
    text = f"{type(error).__name__}: {error}"
    if not is_out_of_memory(error):
        return text
    reading = memory_reading()
    figures = (f" (allocated {reading[0] / GB:.2f} GB, "
               f"reserved {reading[1] / GB:.2f} GB)") if reading else ""
    return f"out of memory on rank {rank}{figures}: {text}"


def is_out_of_memory(error: BaseException) -> bool:
    # On CPU, torch's allocator raises a plain RuntimeError ("DefaultCPUAllocator: can't
    # allocate memory: you tried to allocate N bytes. Error code 12").
    return (isinstance(error, (torch.OutOfMemoryError, MemoryError))
            or "can't allocate memory" in str(error))


def accelerator_memory_reading(device: torch.device) -> MemoryReading:
    """Reads the CUDA caching allocator of `device`; on CPU there is none to read."""
    def read() -> tuple[float, float] | None:
        if device.type != "cuda":
            return None
        return (float(torch.cuda.memory_allocated(device)),
                float(torch.cuda.memory_reserved(device)))
    return read
