"""The memory planner: one counting convention (the ZeRO paper's, against the napkin sum and
DeepSpeed's estimator), golden plans. Model counts: test_model_counts.py; the advice:
test_plan_advice.py. (Measured bytes of real 2-rank runs are checked in tests/trainer.)"""
import json
import os
from pathlib import Path

import pytest

from tunedeck.job_spec import JobSpec
from tunedeck.planner.advice import plan_memory
from tunedeck.planner.architectures import shape_from_config
from tunedeck.planner.memory_plan import GpuSet, deepspeed_zero2_estimate, plan_strategies
from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA, ModelShape
from tunedeck.planner.shape_source import KNOWN_SHAPES, known_shape, resolve_model_shape
from tunedeck.units import GB

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
LLAMA_13B = known_shape("meta-llama/Llama-2-13b-hf")


def model_states_gb(plan) -> float:
    breakdown = plan.breakdown
    return (breakdown.params + breakdown.grads + breakdown.optimizer) / GB


def test_13b_full_fine_tune_under_ddp_is_208_gb_and_the_napkins_156_is_explained():
    spec = JobSpec(max_steps=1, method="full", model=LLAMA_13B.name)
    plan = plan_memory(spec, GpuSet(4, 80), LLAMA_13B)
    ddp = plan.strategies["ddp"]
    # 26 GB bf16 weights + 26 GB bf16 gradients + 156 GB of fp32 master, momentum, variance.
    assert (round(ddp.breakdown.params / GB), round(ddp.breakdown.grads / GB),
            round(ddp.breakdown.optimizer / GB)) == (26, 26, 156)
    assert round(model_states_gb(ddp)) == 208
    # The same state counted once: DDP's optimizer is the four ZeRO-2 shards together.
    zero2 = plan.strategies["zero2"]
    assert ddp.breakdown.optimizer == pytest.approx(4 * zero2.breakdown.optimizer)
    napkin = [reason for reason in plan.reasons if "napkin" in reason]
    assert len(napkin) == 1
    assert "are 208 GB" in napkin[0] and "sum, 156 GB" in napkin[0] and "master copy" in napkin[0]
    assert "52.1 GB" in napkin[0]


def test_the_zero_papers_figure_1_within_3_percent():
    """7.5B parameters on 64 GPUs (8 nodes x 8), mixed-precision Adam (K = 12): DDP 120 GB
    of model states per GPU, ZeRO-2 (P_os+g) 16.6 GB, full sharding (P_os+g+p) 1.9 GB."""
    # A Llama-shaped 7.5B: 32 layers of width 4096, MLP 12960, 32000-entry vocabulary.
    shape = ModelShape("paper-7.5b", 32000, 4096, 12960, 32, 32, 32, 128)
    assert shape.total_parameters / 1e9 == pytest.approx(7.5, rel=0.01)
    spec = JobSpec(max_steps=1, method="full", model="paper-7.5b")
    plans = plan_strategies(spec, GpuSet(8, 80, nodes=8), shape)
    assert model_states_gb(plans["ddp"]) == pytest.approx(120, rel=0.03)
    assert model_states_gb(plans["zero2"]) == pytest.approx(16.6, rel=0.03)
    assert model_states_gb(plans["fsdp"]) == pytest.approx(1.9, rel=0.03)


def test_fp32_weights_are_their_own_master_copy():
    spec = JobSpec(max_steps=1, method="full", model=LLAMA_13B.name, precision="fp32")
    ddp = plan_strategies(spec, GpuSet(4, 80), LLAMA_13B)["ddp"]
    assert ddp.breakdown.optimizer == pytest.approx(8 * LLAMA_13B.total_parameters)
    assert not [r for r in plan_memory(spec, GpuSet(4, 80), LLAMA_13B).reasons if "napkin" in r]


@pytest.mark.parametrize("gpus_per_node, nodes", [(1, 1), (2, 1), (8, 1), (8, 4), (3, 1)])
def test_zero2_matches_deepspeeds_estimator_to_the_byte_under_its_convention(gpus_per_node, nodes):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    parameters = LLAMA_13B.total_parameters
    for offload in (False, True):
        expected = estimate_zero2_model_states_mem_needs(
            parameters, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=offload)
        assert deepspeed_zero2_estimate(parameters, gpus_per_node=gpus_per_node, nodes=nodes,
                                        cpu_offload=offload) == expected
    # The plan counts 2P + 14P/N; DeepSpeed adds the step-time fp32 gradient partition (4P/N).
    spec = JobSpec(max_steps=1, method="full", model=LLAMA_13B.name)
    zero2 = plan_strategies(spec, GpuSet(gpus_per_node, 80, nodes), LLAMA_13B)["zero2"]
    ranks = gpus_per_node * nodes
    _host, deepspeed_gpu = estimate_zero2_model_states_mem_needs(
        parameters, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=False)
    ours = zero2.breakdown.params + zero2.breakdown.grads + zero2.breakdown.optimizer
    assert int(ours + 4 * parameters / ranks) == pytest.approx(deepspeed_gpu, abs=2)


def test_qlora_plans_refuse_fsdp_and_count_a_4_bit_base():
    spec = JobSpec(max_steps=1, model="meta-llama/Llama-2-7b-hf", method="qlora")
    plans = plan_strategies(spec, GpuSet(1, 80), known_shape(spec.model))
    assert not plans["fsdp"].supported and "ZeRO-2 only" in plans["fsdp"].notes[0]
    # 4-bit decoder linears (about 0.52 bytes each) + bf16 embeddings, head and norms.
    assert 3.4 < plans["zero2"].breakdown.params / GB < 4.0


PLAN_GOLDENS = {
    "plan_llama2_13b_full_8x80": (JobSpec(max_steps=1, model="meta-llama/Llama-2-13b-hf",
                                          method="full", micro_batch_size=2, seq_len=2048,
                                          fsdp={"activation_checkpointing": True}, backend="fsdp"),
                                  GpuSet(8, 80)),
    "plan_qwen7b_lora_2x24": (JobSpec(max_steps=1, model="Qwen/Qwen2.5-7B", seq_len=1024,
                                      micro_batch_size=4), GpuSet(2, 24)),
    # Mixture-of-experts: every expert counted, activations at the routed top-k.
    "plan_mixtral_8x7b_lora_8x80": (JobSpec(max_steps=1, model="mistralai/Mixtral-8x7B-v0.1",
                                            seq_len=2048, micro_batch_size=1), GpuSet(8, 80)),
    "plan_qwen15_moe_full_4x80": (JobSpec(max_steps=1, model="Qwen/Qwen1.5-MoE-A2.7B",
                                          method="full", seq_len=1024), GpuSet(4, 80)),
    "plan_tiny_llama_lora_2x1": (JobSpec(max_steps=1, num_gpus=2, seq_len=64), GpuSet(2, 1)),
}


@pytest.mark.parametrize("name", sorted(PLAN_GOLDENS))
def test_plan_matches_golden(name):
    spec, gpus = PLAN_GOLDENS[name]
    shape = resolve_model_shape(spec.model)
    actual = plan_memory(spec, gpus, shape).to_json()
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert actual == json.loads(path.read_text())


LLAMA_3_8B = known_shape("meta-llama/Meta-Llama-3-8B")


def activations_of(spec: JobSpec, shape: ModelShape) -> float:
    return plan_strategies(spec, GpuSet(1, 141), shape)[spec.backend].breakdown.activations


def test_liger_drops_the_logits_term_for_its_fused_losss_working_memory():
    """Llama-3-8B, seq 4096, micro-batch 1, bf16 LoRA: the logits and their fp32 log-softmax
    are 4096 x 128256 x (2 + 8) bytes = 5.25 GB. Liger's fused cross-entropy keeps the
    input's gradient (4096 x 4096 x 2) and one chunk of logits: ceil(128256 / 4096) = 32
    chunks of 4096 / 32 = 128 tokens, 128 x 128256 x 2 bytes. A full fine-tune adds the
    head's gradient, 128256 x 4096 x 2."""
    plain = JobSpec(model="meta-llama/Meta-Llama-3-8B", max_steps=1, seq_len=4096,
                    micro_batch_size=1)
    liger = plain.model_copy(update={"kernels": "liger"})
    layers, hidden, intermediate = 32, 4096, 14336
    norms_saved = layers * 4096 * 2 * hidden * 4  # two norms a layer: the fp32 copy's 4 bytes
    silu_saved = layers * 4096 * 2 * intermediate  # the SiLU output, c = 2
    logits_saved = 4096 * 128256 * 10 - (4096 * 4096 * 2 + 128 * 128256 * 2)
    assert activations_of(plain, LLAMA_3_8B) - activations_of(liger, LLAMA_3_8B) == \
        norms_saved + silu_saved + logits_saved
    full, full_liger = (spec.model_copy(update={"method": "full"}) for spec in (plain, liger))
    assert activations_of(full, LLAMA_3_8B) - activations_of(full_liger, LLAMA_3_8B) == \
        norms_saved + silu_saved + logits_saved - 128256 * 4096 * 2


def test_padding_free_under_sdpa_counts_its_block_mask_and_flash_needs_none():
    """One row of micro_batch_size x seq_len = 4 x 2048 = 8192 tokens: an 8192^2-byte boolean
    mask, and the bf16 bias SDPA's kernel makes of it for each of the 32 layers (4.3 GB),
    or for the one recomputed layer under activation checkpointing."""
    padded = JobSpec(model="meta-llama/Meta-Llama-3-8B", max_steps=1, seq_len=2048)
    padding_free = padded.model_copy(update={"padding_free": True})
    flash = padding_free.model_copy(update={"attention": "flash"})
    assert activations_of(padding_free, LLAMA_3_8B) - activations_of(padded, LLAMA_3_8B) == \
        (1 + 32 * 2) * 8192**2
    checkpointed = JobSpec(model="meta-llama/Meta-Llama-3-8B", max_steps=1, seq_len=2048,
                           zero2={"activation_checkpointing": True})
    assert activations_of(checkpointed.model_copy(update={"padding_free": True}), LLAMA_3_8B) \
        - activations_of(checkpointed, LLAMA_3_8B) == (1 + 2) * 8192**2
    assert activations_of(flash, LLAMA_3_8B) == activations_of(padded, LLAMA_3_8B)
