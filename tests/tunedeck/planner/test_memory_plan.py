"""The memory planner: one counting convention (the ZeRO paper's, against the napkin sum and
DeepSpeed's estimator), golden plans. Model counts: test_model_counts.py; the advice:
test_plan_advice.py. (Measured bytes of real 2-rank runs are checked in tests/trainer.)"""
import json
import os
from pathlib import Path

import pytest

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.advice import plan_memory
from tunedeck.planner.architectures import shape_from_config
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import plan_strategies
from tunedeck.planner.model_shapes import BUILTIN_TINY_LLAMA, ModelShape
from tunedeck.planner.shape_source import KNOWN_SHAPES, known_shape, resolve_model_shape
from tunedeck.units import GB, format_size

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


def deepspeed_zero2_estimate(total_parameters: int, *, gpus_per_node: int, nodes: int,
                             cpu_offload: bool, additional_buffer_factor: float = 1.5
                             ) -> tuple[int, int]:
    """(host bytes, GPU bytes) by DeepSpeed's own ZeRO-2 convention (2P + 18P/N on the GPU;
    2P with offload), as `estimate_zero2_model_states_mem_needs` counts them."""
    total_gpus = gpus_per_node * nodes
    if cpu_offload:
        gpu = 2 * total_parameters
        host = total_parameters * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu = 2 * total_parameters + int(18 * total_parameters / total_gpus)
        host = total_parameters * 4 * gpus_per_node * additional_buffer_factor
    return int(host), int(gpu)


@pytest.mark.parametrize("gpus_per_node, nodes", [(1, 1), (2, 1), (8, 1), (8, 4), (3, 1)])
def test_zero2_matches_deepspeeds_estimator_to_the_byte_under_its_convention(gpus_per_node, nodes):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    parameters = LLAMA_13B.total_parameters
    for offload in (False, True):
        expected = estimate_zero2_model_states_mem_needs(
            parameters, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=offload)
        assert deepspeed_zero2_estimate(parameters, gpus_per_node=gpus_per_node, nodes=nodes,
                                        cpu_offload=offload) == expected
    # The plan's model states are 2P + 14P/N; DeepSpeed adds the step's fp32 gradient
    # partition (4P/N), which the plan counts among the step's temporaries ("other").
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
    # A host without GPUs: two CPU ranks sharing 8 GB of RAM, no card, no step times.
    "plan_tiny_llama_lora_cpu_2_ranks": (JobSpec(max_steps=1, num_gpus=2, seq_len=64),
                                         GpuSet(2, 4, device="cpu")),
    # Objective dpo: two rows a pair. A full fine-tune with reference auto holds a frozen
    # copy (whole on each ZeRO-2 rank, sharded under FSDP), precomputed none; LoRA's
    # reference is its base with the adapter off either way.
    **{f"plan_llama31_8b_dpo_{method}_{reference}_{gpus.count}x80": (
        JobSpec(max_steps=1, model="meta-llama/Llama-3.1-8B", objective="dpo", method=method,
                backend="zero2", num_gpus=gpus.count, seq_len=2048, micro_batch_size=2,
                dpo={"reference": reference}), gpus)
       for method, gpus in (("full", GpuSet(8, 80)), ("lora", GpuSet(2, 80)))
       for reference in ("auto", "precomputed")},
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
    """Llama-3-8B, seq 4096, micro-batch 1, bf16 LoRA: the loss holds three fp32 copies of
    the logits at the start of backward, 4096 x 128256 x 12 bytes = 6.3 GB. Liger's fused
    cross-entropy keeps the input's gradient (4096 x 4096 x 2) and one chunk of logits:
    ceil(128256 / 4096) = 32 chunks of 4096 / 32 = 128 tokens, 128 x 128256 x 2 bytes. Its
    norms keep their bf16 input instead of an fp32 copy (and, when the norm's weight trains,
    the normalized output), its SwiGLU no SiLU output. A full fine-tune adds the head's
    gradient, and no longer keeps the head's input."""
    plain = JobSpec(model="meta-llama/Meta-Llama-3-8B", max_steps=1, seq_len=4096,
                    micro_batch_size=1, kernels="none")
    liger = plain.model_copy(update={"kernels": "liger"})
    tokens, layers, hidden, intermediate, vocab = 4096, 32, 4096, 14336, 128256
    norms = layers * 2 + 1  # two a layer, and the final norm
    silu_saved = layers * tokens * 2 * intermediate  # the SiLU output, c = 2
    logits_saved = tokens * vocab * 12 - (tokens * hidden * 2 + 128 * vocab * 2)
    lora_norms_saved = norms * tokens * hidden * (4 - 2)
    assert activations_of(plain, LLAMA_3_8B) - activations_of(liger, LLAMA_3_8B) == \
        lora_norms_saved + silu_saved + logits_saved
    full, full_liger = (spec.model_copy(update={"method": "full"}) for spec in (plain, liger))
    full_norms_saved = norms * tokens * hidden * (4 + 2 - 2) + tokens * hidden * 2
    assert activations_of(full, LLAMA_3_8B) - activations_of(full_liger, LLAMA_3_8B) == \
        full_norms_saved + silu_saved + logits_saved - vocab * hidden * 2


def test_kernels_auto_is_planned_as_liger_for_lora_on_a_family_liger_patches():
    lora = JobSpec(model="meta-llama/Meta-Llama-3-8B", max_steps=1, seq_len=4096)
    assert lora.kernels == "auto"
    assert activations_of(lora, LLAMA_3_8B) == \
        activations_of(lora.model_copy(update={"kernels": "liger"}), LLAMA_3_8B)
    full = lora.model_copy(update={"method": "full"})
    assert activations_of(full, LLAMA_3_8B) == \
        activations_of(full.model_copy(update={"kernels": "none"}), LLAMA_3_8B)
    # Each strategy also says what a worker without liger-kernel needs (it runs plain).
    plans = plan_strategies(lora, GpuSet(1, 141), LLAMA_3_8B)
    plain = plan_strategies(lora.model_copy(update={"kernels": "none"}), GpuSet(1, 141),
                            LLAMA_3_8B)
    assert plans["zero2"].notes == (
        "planned with Liger's kernels (kernels auto on a GPU worker with liger-kernel); a "
        "worker without liger-kernel runs it plain: "
        f"{format_size(plain['zero2'].breakdown.total / GB)} per GPU",)
    assert plain["zero2"].breakdown.total > plans["zero2"].breakdown.total
    assert plan_strategies(full, GpuSet(1, 141), LLAMA_3_8B)["zero2"].notes == ()


def test_padding_free_under_sdpa_counts_its_block_mask_and_flash_needs_none():
    """Four padded rows of 2048 carry a boolean mask per row, and sdpa's kernel keeps a bf16
    bias made of it on each of the 32 layers: (1 + 32 x 2) x 4 x 2048^2 bytes. Padding-free,
    they are one row of 8192 tokens: (1 + 32 x 2) x 8192^2 (4.4 GB); under activation
    checkpointing only the recomputed layer keeps a bias. Flash attention needs no mask and
    attends with Llama-3's 8 key/value heads as they are, where sdpa with a mask gets them
    repeated to the 32 query heads' width (two 3072-wide copies a token and layer)."""
    padded = JobSpec(model="meta-llama/Meta-Llama-3-8B", max_steps=1, seq_len=2048,
                     micro_batch_size=4, kernels="none")
    padding_free = padded.model_copy(update={"padding_free": True})
    flash = padding_free.model_copy(update={"attention": "flash"})
    assert activations_of(padding_free, LLAMA_3_8B) - activations_of(padded, LLAMA_3_8B) == \
        (1 + 32 * 2) * (8192**2 - 4 * 2048**2)
    # Checkpointed, the recomputed layer and its bias outweigh Liger's small loss share.
    checkpointed = JobSpec(model="meta-llama/Meta-Llama-3-8B", max_steps=1, seq_len=2048,
                           micro_batch_size=4, kernels="liger",
                           zero2={"activation_checkpointing": True})
    assert activations_of(checkpointed.model_copy(update={"padding_free": True}), LLAMA_3_8B) \
        - activations_of(checkpointed, LLAMA_3_8B) == (1 + 2) * (8192**2 - 4 * 2048**2)
    repeated_kv = 32 * 8192 * 2 * 2 * (4096 - 1024)
    assert activations_of(padded, LLAMA_3_8B) - activations_of(flash, LLAMA_3_8B) == \
        (1 + 32 * 2) * 4 * 2048**2 + repeated_kv


def test_step_times_read_in_the_unit_that_fits_and_a_lora_plan_counts_the_model_once():
    from tunedeck.planner.plan_text import plan_as_text
    from tunedeck.units import format_seconds

    assert [format_seconds(seconds) for seconds in (2.52e-06, 0.0123, 7.91)] == \
        ["2.52 µs", "12.3 ms", "7.91 s"]
    spec = JobSpec(model="builtin:tiny-llama", method="lora", max_steps=3)
    text = plan_as_text(plan_memory(spec, GpuSet(2, 80), BUILTIN_TINY_LLAMA).to_json())
    assert "e-0" not in text  # no "2.52e-06 s a step"
    # The model's count, as the advice names it, and the adapter's apart.
    model_count = text.split(" parameters and a ")[0].rsplit(" ", 1)[-1]
    assert f"The selection guide agrees: {model_count} parameters with lora" in text
