"""The memory planner: DESIGN's napkin, DeepSpeed's estimator, golden plans and the advice.
(Measured bytes of real 2-rank runs are checked against it in tests/trainer.)"""
import json
import os
from pathlib import Path

import pytest

from tunedeck.job_spec import JobSpec
from tunedeck.planner.advice import plan_memory
from tunedeck.planner.memory_plan import GB, GpuSet, deepspeed_zero2_estimate, plan_strategies
from tunedeck.planner.model_shapes import (BUILTIN_TINY_LLAMA, KNOWN_SHAPES, known_shape,
                                   resolve_model_shape, shape_from_config)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
LLAMA_13B = known_shape("meta-llama/Llama-2-13b-hf")


def model_states_gb(plan) -> float:
    breakdown = plan.breakdown
    return (breakdown.params + breakdown.grads + breakdown.optimizer) / GB


def test_13b_full_fine_tune_under_ddp_is_156_gb_per_gpu():
    spec = JobSpec(max_steps=1, method="full", model=LLAMA_13B.name)
    ddp = plan_strategies(spec, GpuSet(8, 80), LLAMA_13B)["ddp"]
    # 26 GB bf16 weights + 26 GB bf16 gradients + 104 GB fp32 Adam moments.
    assert (round(ddp.breakdown.params / GB), round(ddp.breakdown.grads / GB),
            round(ddp.breakdown.optimizer / GB)) == (26, 26, 104)
    assert round(model_states_gb(ddp)) == 156


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


def test_known_architectures_have_their_published_sizes():
    published_billions = {
        "meta-llama/Llama-2-7b-hf": 6.74, "meta-llama/Llama-2-13b-hf": 13.02,
        "meta-llama/Llama-2-70b-hf": 68.98, "meta-llama/Meta-Llama-3-8B": 8.03,
        "meta-llama/Meta-Llama-3-70B": 70.55, "mistralai/Mistral-7B-v0.1": 7.24,
        "Qwen/Qwen2.5-0.5B": 0.494, "Qwen/Qwen2.5-1.5B": 1.544, "Qwen/Qwen2.5-3B": 3.09,
        "Qwen/Qwen2.5-7B": 7.62, "Qwen/Qwen2.5-14B": 14.77, "Qwen/Qwen2.5-32B": 32.76,
        "Qwen/Qwen2.5-72B": 72.71,
    }
    assert {shape.name for shape in KNOWN_SHAPES.values()} == set(published_billions)
    for name, billions in published_billions.items():
        assert known_shape(name).total_parameters / 1e9 == pytest.approx(billions, rel=2e-3), name
    assert known_shape("qwen/qwen2.5-7b-instruct") == known_shape("Qwen/Qwen2.5-7B")


def test_shapes_come_from_a_local_config_or_the_hub_cache(tmp_path, monkeypatch):
    config = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 128,
              "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
              "num_key_value_heads": 4}
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    assert resolve_model_shape(str(folder)).num_kv_heads == 4
    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 5}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model_shape("someone/tiny").num_layers == 5
    assert resolve_model_shape("builtin:tiny-llama") == BUILTIN_TINY_LLAMA
    with pytest.raises(ValueError, match="model nobody/unknown: no config.json found"):
        resolve_model_shape("nobody/unknown")
    with pytest.raises(ValueError, match="lacks num_hidden_layers"):
        shape_from_config("odd", {"vocab_size": 1, "hidden_size": 1, "intermediate_size": 1,
                                  "num_attention_heads": 1})


ADVICE_CASES = [
    # (model, method, gpus, nodes, memory, recommended)
    ("meta-llama/Llama-2-7b-hf", "lora", 8, 1, 80, "zero2"),
    ("Qwen/Qwen2.5-7B", "qlora", 1, 1, 24, "zero2"),
    ("meta-llama/Llama-2-13b-hf", "full", 8, 1, 80, "fsdp"),
    ("meta-llama/Llama-2-7b-hf", "full", 2, 1, 24, "zero2_offload"),
    ("meta-llama/Llama-2-7b-hf", "lora", 8, 2, 80, "fsdp"),
]


@pytest.mark.parametrize("model, method, count, nodes, memory, recommended", ADVICE_CASES)
def test_recommendation_follows_the_selection_guide(model, method, count, nodes, memory, recommended):
    # Buckets of 2e8 elements, as DeepSpeed advises for small cards (5e8 costs 9 GB).
    spec = JobSpec(max_steps=1, model=model, method=method, micro_batch_size=1, seq_len=1024,
                   zero2={"activation_checkpointing": True, "reduce_bucket_size": 200_000_000,
                          "allgather_bucket_size": 200_000_000})
    plan = plan_memory(spec, GpuSet(count, memory, nodes), known_shape(model))
    assert plan.recommended == recommended, plan.reasons
    assert plan.verdicts[recommended] in ("fits", "tight")
    assert plan.reasons and all(reason.endswith(".") for reason in plan.reasons)


def test_nothing_fits_gives_changes_that_do_with_their_figures():
    spec = JobSpec(max_steps=1, model="meta-llama/Llama-2-70b-hf", method="full",
                   micro_batch_size=8, seq_len=4096)
    plan = plan_memory(spec, GpuSet(2, 24), known_shape(spec.model))
    assert plan.recommended is None and "Nothing fits" in plan.reasons[-1]
    assert plan.suggestions, "expected at least one change that fits"
    for suggestion in plan.suggestions:
        assert suggestion["fits"] == "fits" and suggestion["total_gb"] < 24


def test_default_deepspeed_buckets_on_a_small_card_suggest_smaller_ones():
    spec = JobSpec(max_steps=1, model="meta-llama/Llama-2-7b-hf", method="full",
                   micro_batch_size=1, seq_len=1024, zero2={"activation_checkpointing": True})
    plan = plan_memory(spec, GpuSet(2, 24), known_shape(spec.model))
    assert plan.strategies["zero2_offload"].breakdown.other / GB == pytest.approx(9.0)
    assert any("buckets" in suggestion["change"] for suggestion in plan.suggestions)


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


def test_each_more_gpus_change_plans_the_count_its_label_says():
    from tunedeck.planner.advice import _changes

    spec = JobSpec(max_steps=1, method="qlora", micro_batch_size=1,
                   zero2={"activation_checkpointing": True, "reduce_bucket_size": 100_000_000,
                          "allgather_bucket_size": 100_000_000})
    gpus = GpuSet(1, 24)
    changes = list(_changes(spec, gpus))
    assert [label for label, _change in changes] == [
        "2 GPUs per node", "4 GPUs per node", "8 GPUs per node"]
    for label, change in changes:
        _spec, changed = change(spec, gpus)  # applied to the job as it is, not cumulatively
        assert label == f"{changed.count} GPUs per node"
