"""Golden tests: the generated DeepSpeed JSON, FSDP settings and torchrun argv.

Set UPDATE_GOLDEN=1 to rewrite the golden files after an intended change, then review the diff.
"""
import json
import os
from pathlib import Path

import pytest

from tunedeck.launch_config import build_torchrun_argv, trainer_settings
from tunedeck.backends.fsdp import fsdp_settings
from tunedeck.backends.zero2 import zero2_config
from tunedeck.spec.job_spec import JobSpec

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

SPECS = {
    "zero2_lora_bf16": JobSpec(max_steps=30, num_gpus=2),
    "zero2_offload_fp16": JobSpec(max_steps=30, num_gpus=4, precision="fp16", grad_accum=8,
                                  weight_decay=0.01, max_grad_norm=0.5,
                                  zero2={"offload_optimizer": True, "overlap_comm": False,
                                         "reduce_bucket_size": 200_000_000,
                                         "allgather_bucket_size": 100_000_000}),
    "fsdp_lora_bf16": JobSpec(max_steps=30, num_gpus=2, backend="fsdp"),
    "fsdp_lora_shard_grad_op": JobSpec(max_steps=30, num_gpus=8, backend="fsdp",
                                       fsdp={"sharding_strategy": "shard_grad_op"}),
    "fsdp_full_fp32_offload": JobSpec(max_steps=10, backend="fsdp", method="full",
                                      precision="fp32", weight_decay=0.1, max_grad_norm=0,
                                      fsdp={"cpu_offload": True,
                                                              "activation_checkpointing": True}),
    "zero2_qlora_eval_checkpoints": JobSpec(
        epochs=2, method="qlora", eval_split=0.1, eval_every_steps=50, packing=True,
        checkpoint_every_steps=100, keep_checkpoints=3,
        zero2={"activation_checkpointing": True}),
    "fsdp_fp16_dtypes_prefetch_compile": JobSpec(
        max_steps=30, num_gpus=4, backend="fsdp", method="full", precision="bf16",
        eval_dataset="/data/eval.jsonl",
        fsdp={"param_dtype": "fp16", "reduce_dtype": "bf16", "buffer_dtype": "bf16",
              "backward_prefetch": False, "forward_prefetch": True, "compile": True}),
    # Every speed option on, under each backend.
    "zero2_full_speed_options": JobSpec(
        max_steps=30, num_gpus=8, method="full", kernels="liger", attention="flash",
        packing=True, padding_free=True, fused_optimizer=True),
    "fsdp_lora_speed_options": JobSpec(
        max_steps=30, num_gpus=8, backend="fsdp", kernels="liger", attention="flash",
        padding_free=True, fused_optimizer=True),
}


def generated(name: str) -> dict:
    spec = SPECS[name]
    config = zero2_config(spec) if spec.backend == "zero2" else fsdp_settings(spec)
    return {"config": config, "trainer": trainer_settings(spec),
            "argv": build_torchrun_argv(spec, "/runs/job-1")}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_config_matches_golden(name):
    path = GOLDEN / f"{name}.json"
    actual = generated(name)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert actual == json.loads(path.read_text())


def test_zero2_batch_arithmetic_and_offload():
    config = zero2_config(SPECS["zero2_offload_fp16"])
    assert config["train_batch_size"] == 4 * 8 * 4
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert config["fp16"]["loss_scale"] == 0 and "bf16" not in config
    assert config["optimizer"]["params"]["torch_adam"] is False
    assert config["optimizer"]["params"]["weight_decay"] == 0.01
    assert config["gradient_clipping"] == 0.5
    assert config["zero_optimization"]["reduce_bucket_size"] == 200_000_000
    assert config["zero_optimization"]["allgather_bucket_size"] == 100_000_000


def test_fsdp_keeps_fp32_master_weights_and_reduces_in_fp32():
    precision = fsdp_settings(SPECS["fsdp_lora_bf16"])["mixed_precision"]
    assert precision == {"param_dtype": "bfloat16", "reduce_dtype": "float32",
                         "buffer_dtype": "float32", "master_weights_dtype": "float32"}
    assert fsdp_settings(SPECS["fsdp_lora_bf16"])["loss_scaling"] == "none"


def test_fsdp_param_dtype_follows_precision_unless_set_and_fp16_scales_the_loss():
    fp16 = JobSpec(max_steps=1, backend="fsdp", precision="fp16")
    assert fsdp_settings(fp16)["mixed_precision"]["param_dtype"] == "float16"
    assert fsdp_settings(fp16)["loss_scaling"] == "dynamic"
    explicit = JobSpec(max_steps=1, backend="fsdp", precision="fp16", fsdp={"param_dtype": "bf16"})
    assert fsdp_settings(explicit)["mixed_precision"]["param_dtype"] == "bfloat16"
    assert fsdp_settings(explicit)["loss_scaling"] == "none"


def test_qlora_quantization_is_nf4_double_quant_with_the_spec_compute_dtype():
    quantization = trainer_settings(JobSpec(max_steps=1, method="qlora", precision="fp32"))["quantization"]
    assert quantization == {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                            "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "float32"}
    assert trainer_settings(JobSpec(max_steps=1))["quantization"] is None


def test_argv_is_a_list_with_the_run_dir_as_one_item():
    spec = JobSpec(max_steps=1, num_gpus=3)
    argv = build_torchrun_argv(spec, "/runs/a dir; rm -rf ~", torchrun="/venv/bin/torchrun")
    assert argv[0] == "/venv/bin/torchrun"
    assert argv[-2:] == ["--run-dir", "/runs/a dir; rm -rf ~"]
    assert argv[argv.index("--nproc_per_node") + 1] == "3"


def test_shard_grad_op_keeps_parameters_gathered_after_forward():
    assert fsdp_settings(SPECS["fsdp_lora_shard_grad_op"])["reshard_after_forward"] is False
    assert fsdp_settings(SPECS["fsdp_lora_bf16"])["reshard_after_forward"] is True


def test_a_job_on_several_nodes_launches_each_node_with_the_static_rendezvous_of_node_0():
    spec = JobSpec(max_steps=5, backend="fsdp", num_gpus=4, num_nodes=2)
    argv = build_torchrun_argv(spec, "/runs/job-7", node_rank=1, rendezvous="gpu-1:29500",
                               job_id=7, start_timeout_seconds=120)
    assert argv[1:13] == ["--nnodes", "2", "--node-rank", "1", "--rdzv-backend", "static",
                          "--rdzv-endpoint", "gpu-1:29500", "--rdzv-id", "tunedeck-job-7",
                          "--rdzv-conf", "timeout=120"]
    assert "--standalone" not in argv and argv[argv.index("--nproc_per_node") + 1] == "4"
