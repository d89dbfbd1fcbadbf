"""Spec choices the registered workers cannot run, refused before the job is stored.

What the trainer refuses on a host without GPUs: DeepSpeed (backend zero2) with fp16 raises
"Type fp16 is not supported on your device" on its CPU accelerator, so the job would fail
only after it was queued. bf16 and fp32 run on CPU under ZeRO-2, so those are offered.
With no worker registered for the job there is nothing to judge: the job may wait for a
GPU worker, so nothing is refused."""
from __future__ import annotations

from typing import Sequence

from tunedeck.cluster.placement import WorkerView, serves
from tunedeck.job_spec import JobSpec


def host_problems(spec: JobSpec, workers: Sequence[WorkerView]) -> list[tuple[str, str]]:
    """(spec field, why and what to pick instead) for each choice no worker that could place
    the job can run; [] when one of them has GPUs or none is registered."""
    candidates = [worker for worker in workers if serves(worker, spec)]
    if not candidates or any(worker.gpu_indices for worker in candidates):
        return []
    problems = []
    if spec.backend == "zero2" and spec.precision == "fp16":
        problems.append(("precision", "this host has no GPU: fp16 under ZeRO-2 needs one "
                                      "(DeepSpeed refuses fp16 on CPU) — pick bf16 or fp32"))
    return problems
