"""The disk a job's run folder needs at its fullest: its checkpoints and its export.

Pure, like the memory plan: the spec and the model's shape in, bytes out. The worker holds
a job in the queue while the disk under its run folder has less room than this
(worker/disk_room.py), rather than start it to fail when a checkpoint no longer fits.

- One checkpoint is the trainable weights and their optimizer state, every rank's part of
  them together: per trainable parameter the fp32 master copy and Adam's two fp32 moments
  (`ADAM_STATE_BYTES`), plus the weights in the compute dtype, which DeepSpeed saves beside
  its fp32 partition (FSDP's fp32 shards are the weights: for it this counts 2 bytes a
  parameter in bf16 more than it writes). A LoRA checkpoint holds the adapter, not the
  frozen base. Each rank adds its random generators and the format's index files.
- The rotation writes a new checkpoint before it removes the oldest, so up to
  keep_checkpoints + 1 are on disk at once (fewer when the run saves fewer).
- The export is `merged/` (every parameter in the export dtype; auto is the base's stored
  dtype where its safetensors headers were read, else fp32, the trainer's own fallback) and,
  for LoRA and QLoRA, `adapter/` in fp32. It is written after training, beside the
  checkpoints kept.

Logs, metrics and the tokenized data are left out: they are small next to these for any
model worth a disk check, and their size depends on the data, which is not read here.
"""
from __future__ import annotations

from dataclasses import dataclass

from tunedeck.backends.base import ADAM_STATE_BYTES
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.memory_plan import model_states
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import FP32_BYTES, compute_bytes

# Each rank's generator state (about 10 KB) and its share of the format's index and helper
# files (DCP's .metadata, DeepSpeed's zero_to_fp32.py: tens of KB).
CHECKPOINT_FILES_BYTES_PER_RANK = 64 * 1024
# safetensors' dtype names, as the shape's `parameters_by_dtype` counts them.
STORED_DTYPES = {"F32": "fp32", "BF16": "bf16", "F16": "fp16"}
FALLBACK_EXPORT_DTYPE = "fp32"


@dataclass(frozen=True)
class DiskNeed:
    checkpoint_bytes: int  # one checkpoint, all ranks
    checkpoints_at_once: int  # the most on disk together, the one being written included
    checkpoints_kept: int  # what stays beside the export
    export_bytes: int

    @property
    def total_bytes(self) -> int:
        """The fullest the run folder gets: while the rotation writes a new checkpoint, or
        while the export is written beside the checkpoints kept."""
        return max(self.checkpoints_at_once * self.checkpoint_bytes,
                   self.checkpoints_kept * self.checkpoint_bytes + self.export_bytes)


def disk_need(spec: JobSpec, shape: ModelShape) -> DiskNeed:
    saves = checkpoint_saves(spec)
    at_once = min(saves, spec.keep_checkpoints + 1) if saves is not None \
        else (spec.keep_checkpoints + 1 if spec.checkpoint_every_steps else 0)
    return DiskNeed(checkpoint_bytes=checkpoint_bytes(spec, shape), checkpoints_at_once=at_once,
                    checkpoints_kept=min(at_once, spec.keep_checkpoints),
                    export_bytes=export_bytes(spec, shape))


def checkpoint_saves(spec: JobSpec) -> int | None:
    """How many checkpoints the run saves; None when its length is in epochs (the step
    count depends on the data, which is not read here)."""
    if not spec.checkpoint_every_steps:
        return 0
    if spec.max_steps is None:
        return None
    return spec.max_steps // spec.checkpoint_every_steps


def checkpoint_bytes(spec: JobSpec, shape: ModelShape) -> int:
    trainable = model_states(spec, shape).trainable
    per_parameter = FP32_BYTES + ADAM_STATE_BYTES + compute_bytes(spec.precision)
    ranks = spec.num_gpus * spec.num_nodes
    return trainable * per_parameter + ranks * CHECKPOINT_FILES_BYTES_PER_RANK


def export_bytes(spec: JobSpec, shape: ModelShape) -> int:
    merged = shape.total_parameters * compute_bytes(export_dtype(spec, shape))
    if spec.method == "full":
        return merged
    return merged + FP32_BYTES * shape.lora_trainable(spec.lora)


def export_dtype(spec: JobSpec, shape: ModelShape) -> str:
    """The spec's export dtype; for auto, the floating dtype holding most of the base's
    stored elements, as trainer/model/export_dtype.py resolves it from the same headers."""
    if spec.export_dtype != "auto":
        return spec.export_dtype
    stored = [(count, STORED_DTYPES[name]) for name, count in shape.parameters_by_dtype
              if name in STORED_DTYPES]
    return max(stored)[1] if stored else FALLBACK_EXPORT_DTYPE
