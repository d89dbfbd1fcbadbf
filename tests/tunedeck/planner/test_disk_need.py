"""The disk a job's run folder needs: checkpoints (as many at once as the rotation holds) and
the export, held to what real runs of the built-in model wrote."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.disk_need import (DiskNeed, checkpoint_bytes, checkpoint_saves, disk_need,
                                        export_bytes, export_dtype)
from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA
from tunedeck.planner.shape_source import known_shape

TINY = {"model": "builtin:tiny-llama", "dataset": "builtin:arithmetic", "num_gpus": 1,
        "max_steps": 6, "checkpoint_every_steps": 2, "keep_checkpoints": 2, "precision": "bf16"}
# What one checkpoint of 6 steps of the built-in model took on disk, every file of
# checkpoints/step-00000006/ (torch 2.13 CPU ranks, one rank): the planner should be close.
MEASURED_CHECKPOINT_BYTES = {("full", "zero2"): 1_789_762, ("full", "fsdp"): 1_667_081,
                             ("lora", "zero2"): 540_354, ("lora", "fsdp"): 645_782}
# merged/ (fp32, the built-in model's own dtype) and, for LoRA, adapter/, from the same runs.
MEASURED_EXPORT_BYTES = {"full": 510_278, "lora": 510_278 + 141_455}


def spec(**overrides) -> JobSpec:
    return JobSpec.model_validate({**TINY, **overrides})


@pytest.mark.parametrize("method, backend", sorted(MEASURED_CHECKPOINT_BYTES))
def test_a_checkpoint_and_the_export_are_planned_close_to_what_runs_wrote(method, backend):
    job = spec(method=method, backend=backend)
    # The planner's per-tensor-free count is furthest off for a tiny LoRA adapter, whose
    # dozens of small tensors each carry a file entry; a real model's are noise.
    assert checkpoint_bytes(job, BUILTIN_TINY_LLAMA) == \
        pytest.approx(MEASURED_CHECKPOINT_BYTES[method, backend], rel=0.2)
    assert export_bytes(job, BUILTIN_TINY_LLAMA) == pytest.approx(MEASURED_EXPORT_BYTES[method],
                                                                  rel=0.05)


def test_the_rotation_holds_one_checkpoint_more_than_it_keeps_while_it_writes():
    need = disk_need(spec(method="full", max_steps=100, checkpoint_every_steps=10,
                          keep_checkpoints=2), BUILTIN_TINY_LLAMA)
    assert (need.checkpoints_at_once, need.checkpoints_kept) == (3, 2)
    assert need.total_bytes == max(3 * need.checkpoint_bytes,
                                   2 * need.checkpoint_bytes + need.export_bytes)


def test_the_fullest_moment_is_the_rotation_or_the_export_whichever_is_larger():
    # Full fine-tune: checkpoints (weights and Adam) dwarf the bf16 export.
    assert DiskNeed(100, 3, 2, 30).total_bytes == 300
    # LoRA: small checkpoints, a whole merged model to write beside them.
    assert DiskNeed(10, 3, 2, 1000).total_bytes == 1020


@pytest.mark.parametrize("overrides, saves, at_once", [
    ({"checkpoint_every_steps": 0}, 0, 0),
    ({"max_steps": 6, "checkpoint_every_steps": 4}, 1, 1),  # fewer saves than it keeps
    ({"max_steps": 6, "checkpoint_every_steps": 2, "keep_checkpoints": 1}, 3, 2),
    ({"max_steps": None, "epochs": 1.0, "checkpoint_every_steps": 5}, None, 3),  # unknown: all
])
def test_how_many_checkpoints_are_on_disk_at_once(overrides, saves, at_once):
    job = spec(**overrides)
    assert checkpoint_saves(job) == saves
    assert disk_need(job, BUILTIN_TINY_LLAMA).checkpoints_at_once == at_once


def test_a_job_without_checkpoints_needs_room_for_its_export_only():
    need = disk_need(spec(checkpoint_every_steps=0), BUILTIN_TINY_LLAMA)
    assert need.total_bytes == need.export_bytes == export_bytes(spec(), BUILTIN_TINY_LLAMA)


def test_an_8b_model_as_people_size_it():
    shape = known_shape("meta-llama/Meta-Llama-3-8B")
    full = spec(model="meta-llama/Meta-Llama-3-8B", method="full", num_gpus=8, export_dtype="bf16")
    # 8.03B parameters: 14 bytes each (fp32 master, Adam's two moments, bf16 weights).
    assert checkpoint_bytes(full, shape) / 1e9 == pytest.approx(112.4, rel=0.01)
    assert export_bytes(full, shape) / 1e9 == pytest.approx(16.06, rel=0.01)
    lora = spec(model="meta-llama/Meta-Llama-3-8B", method="lora", export_dtype="bf16")
    assert checkpoint_bytes(lora, shape) < 0.01 * checkpoint_bytes(full, shape)
    # The merged model is the whole model whatever the method; the adapter comes on top.
    assert export_bytes(lora, shape) > export_bytes(full, shape)


def test_export_dtype_auto_is_what_the_base_stores_else_fp32():
    stored = replace(BUILTIN_TINY_LLAMA, parameters_by_dtype=(("BF16", 900), ("F32", 100)))
    assert export_dtype(spec(), stored) == "bf16"
    assert export_dtype(spec(), BUILTIN_TINY_LLAMA) == "fp32"  # nothing read: the fallback
    assert export_dtype(spec(export_dtype="fp16"), stored) == "fp16"
