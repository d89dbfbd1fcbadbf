"""What a rank tells the worker: one JSON event a line in `metrics/rank-<K>.jsonl`.

The schema lives in `tunedeck.metrics.events`; this module only fills it. `--metrics off`
swaps in `NullTelemetry`, so the training loop never asks whether anyone is listening.
Each line is flushed at once because the worker tails these files while the job runs.
"""
from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Protocol

from tunedeck.metrics.events import (EVAL, FOOTPRINT, MEMORY, NOTICE, PHASE, ROLLOUT, STEP,
                                     encode_event)
from tunedeck.units import GIB, MIB  # the readings' `*_mb` fields are MiB


class Telemetry(Protocol):
    def notice(self, message: str, *, level: str = "info") -> None: ...

    def step(self, *, step: int, loss: float, learning_rate: float, grad_norm: float,
             tokens_per_second: float, step_seconds: float, tokens: int,
             **extra: float) -> None: ...

    def memory(self, *, step: int) -> None: ...

    def eval(self, *, step: int, eval_loss: float, eval_tokens: int) -> None: ...

    def footprint(self, *, step: int, params_bytes: int, grads_bytes: int,
                  optimizer_bytes: int) -> None: ...

    def phase(self, *, phase: str, state: str, done: float | None, total: float | None,
              unit: str | None, elapsed: float, message: str | None) -> None: ...

    def rollout(self, *, step: int, samples: list[dict]) -> None: ...

    def close(self) -> None: ...


class NullTelemetry:
    def notice(self, message: str, *, level: str = "info") -> None:
        pass

    def step(self, **fields) -> None:
        pass

    def memory(self, *, step: int) -> None:
        pass

    def eval(self, *, step: int, eval_loss: float, eval_tokens: int) -> None:
        pass

    def footprint(self, **fields) -> None:
        pass

    def phase(self, **fields) -> None:
        pass

    def rollout(self, **fields) -> None:
        pass

    def close(self) -> None:
        pass


class FileTelemetry:
    """Appends this rank's events to its own file (appending keeps a restarted rank's history)."""

    def __init__(self, path: Path, *, rank: int, device):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._rank = rank
        self._device = device
        self._host = socket.gethostname()
        self._process = _current_process()

    def _write(self, kind: str, **fields) -> None:
        self._file.write(encode_event(kind, rank=self._rank, time=time.time(), **fields))
        self._file.flush()

    def notice(self, message: str, *, level: str = "info") -> None:
        self._write(NOTICE, level=level, message=message)

    def step(self, *, step: int, loss: float, learning_rate: float, grad_norm: float,
             tokens_per_second: float, step_seconds: float, tokens: int,
             **extra: float) -> None:  # extra: mfu and mfu_6n, on a GPU
        self._write(STEP, step=step, loss=loss, learning_rate=learning_rate, grad_norm=grad_norm,
                    tokens_per_second=tokens_per_second, step_seconds=step_seconds, tokens=tokens,
                    **extra)

    def memory(self, *, step: int) -> None:
        self._write(MEMORY, step=step, host=self._host, device=str(self._device),
                    **device_memory_mb(self._device),
                    rss_mb=self._process.memory_info().rss / MIB)

    def eval(self, *, step: int, eval_loss: float, eval_tokens: int) -> None:
        self._write(EVAL, step=step, eval_loss=eval_loss, eval_tokens=eval_tokens)

    def footprint(self, *, step: int, params_bytes: int, grads_bytes: int,
                  optimizer_bytes: int) -> None:
        self._write(FOOTPRINT, step=step, params_bytes=params_bytes, grads_bytes=grads_bytes,
                    optimizer_bytes=optimizer_bytes)

    def phase(self, *, phase: str, state: str, done: float | None, total: float | None,
              unit: str | None, elapsed: float, message: str | None) -> None:
        self._write(PHASE, phase=phase, state=state, done=done, total=total, unit=unit,
                    elapsed=elapsed, message=message)

    def rollout(self, *, step: int, samples: list[dict]) -> None:
        self._write(ROLLOUT, step=step, samples=samples)

    def close(self) -> None:
        self._file.close()


def device_memory_mb(device) -> dict[str, float | None]:
    """Allocator readings on a GPU (no sync needed); a CPU has none, so they are null."""
    if device.type != "cuda":
        return {"allocated_mb": None, "reserved_mb": None, "peak_mb": None,
                "peak_reserved_mb": None}
    import torch

    return {
        "allocated_mb": torch.cuda.memory_allocated(device) / MIB,
        "reserved_mb": torch.cuda.memory_reserved(device) / MIB,
        "peak_mb": torch.cuda.max_memory_allocated(device) / MIB,
        "peak_reserved_mb": torch.cuda.max_memory_reserved(device) / MIB,
    }


def start_training_peaks(device) -> None:
    """From here on the allocator's peaks are the training's (the memory planner's figure),
    not loading's or wrapping's."""
    if device.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def allocator_peaks(device) -> tuple[float, float] | None:
    """(peak allocated, peak reserved) bytes of the CUDA allocator; None on a CPU."""
    readings = device_memory_mb(device)
    if readings["peak_mb"] is None:
        return None
    return readings["peak_mb"] * MIB, readings["peak_reserved_mb"] * MIB


def first_step_memory_text(before_update: tuple[float, float],
                           after_update: tuple[float, float]) -> str:
    """One log line: where the first step's memory peaked, in forward and backward or in
    the optimizer step (which makes Adam's state and its temporaries), as the memory
    planner counts them (docs/memory-plan.md). The peaks are the training's since its
    start (start_training_peaks), so an update that needed no more leaves them as they
    were."""
    backward = (f"memory of the first step: forward and backward peaked at "
                f"{before_update[0] / GIB:.2f} GiB allocated ({before_update[1] / GIB:.2f} GiB "
                f"reserved)")
    if after_update[0] <= before_update[0]:
        return f"{backward}; the optimizer step needed no more"
    return (f"{backward}; the optimizer step peaked higher, at {after_update[0] / GIB:.2f} GiB "
            f"({after_update[1] / GIB:.2f} GiB reserved)")


def _current_process():
    import psutil

    return psutil.Process()


def open_telemetry(*, enabled: bool, path: Path, rank: int, device) -> Telemetry:
    return FileTelemetry(path, rank=rank, device=device) if enabled else NullTelemetry()
