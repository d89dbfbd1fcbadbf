"""Libraries a job's start-up would load but the job never runs, kept out of the process.

Each is switched off only where nothing of this job can need it, so what the rank computes
is the same, only its start-up is shorter. Call `keep_unused_libraries_out` once, from the
process's entry point, before transformers, peft or DeepSpeed is imported.
"""
from __future__ import annotations

import os
import sys

from tunedeck.backends import backend_of
from tunedeck.spec.job_spec import JobSpec


def keep_unused_libraries_out(spec: JobSpec) -> None:
    keep_bitsandbytes_out_unless_qlora(spec)
    keep_torch_compile_off_unless_used(spec)


def keep_bitsandbytes_out_unless_qlora(spec: JobSpec) -> None:
    """For the rest of this process, treat bitsandbytes as not installed unless the job is
    QLoRA, the one method that uses it. peft imports it whenever it is installed, and its
    import runs `torch.compile` on its kernels, which loads TorchInductor: seconds of every
    LoRA and full launch's start-up (3-4 s of a CPU rank) for a library it never calls.
    None in sys.modules reads as "not found" to `importlib.util.find_spec` and fails
    `import bitsandbytes`, so peft and transformers skip their 8/4-bit layer support, which
    only a quantized base needs."""
    if spec.method != "qlora" and "bitsandbytes" not in sys.modules:
        sys.modules["bitsandbytes"] = None


def keep_torch_compile_off_unless_used(spec: JobSpec) -> None:
    """Make `torch.compile` a no-op in this process unless the job compiles something: the
    FSDP `compile` knob, or QLoRA (bitsandbytes compiles its kernels). DeepSpeed imports its
    Muon optimizer to check which optimizers ZeRO supports, and that import decorates its
    kernels with `torch.compile`, which loads TorchInductor (2-5 s of a ZeRO-2 CPU rank's
    start-up); the kernels never run for AdamW. Dynamo reads this variable at each
    `torch.compile` call. A job's own setting wins."""
    compiles = spec.method == "qlora" or backend_of(spec).compiles(spec)
    if not compiles:
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
