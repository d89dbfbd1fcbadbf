"""The advice: the fastest set-up that fits, CPU offload only when nothing on the GPUs fits,
alternatives with their costs, and every example planned against the cards it names."""
import re
from pathlib import Path

import pytest
import yaml

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.advice import plan_memory
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import spec_strategy
from tunedeck.planner.setups import apply_spec_changes
from tunedeck.planner.shape_source import known_shape, resolve_model_shape
from tunedeck.planner.step_cost import step_cost

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CARDS_LINE = re.compile(r"^# Planned against: (\d+) x (\d+)(?:-(\d+))? GB", re.MULTILINE)


def plan(model, gpus, **spec):
    job = JobSpec(max_steps=1, model=model, **spec)
    return plan_memory(job, gpus, known_shape(model)), job


def test_13b_full_on_4x80_without_checkpointing_gets_fsdp_with_it_not_offload():
    """With checkpointing the activations no longer cover foreach AdamW's fp32 copy of the
    3.25B parameters a GPU steps (13 GB): the plan counts what it needs beyond them."""
    result, _job = plan("meta-llama/Llama-2-13b-hf", GpuSet(4, 80), method="full",
                        backend="fsdp", seq_len=2048, micro_batch_size=2, num_gpus=4)
    assert result.verdicts["fsdp"] == "does not fit"  # as written, no checkpointing
    best = result.recommended
    assert best["strategy"] == "fsdp" and best["changes"] == ["activation checkpointing"]
    assert best["fits"] == "fits" and best["total_gb"] == pytest.approx(65.1, abs=0.1)
    assert "+33% compute" in best["cost"]
    assert best["spec_changes"] == {"fsdp.activation_checkpointing": True}
    fused = apply_spec_changes(_job, {**best["spec_changes"], "fused_optimizer": True})
    assert plan_memory(fused, GpuSet(4, 80), known_shape(fused.model)) \
        .strategies["fsdp"].breakdown.total / 1e9 == pytest.approx(59.3, abs=0.1)
    assert all(not a["strategy"].endswith("_offload") or a["relative_step_time"] > 2
               for a in result.alternatives)


def test_llama3_8b_lora_on_2x24_at_2048_gets_zero2_with_checkpointing():
    result, job = plan("meta-llama/Meta-Llama-3-8B", GpuSet(2, 24), method="lora",
                       seq_len=2048)
    best = result.recommended
    assert best["strategy"] == "zero2" and "activation checkpointing" in best["changes"]
    assert best["total_gb"] < 22.5  # what the card has after the CUDA context
    changed = apply_spec_changes(job, best["spec_changes"])
    assert changed.zero2.activation_checkpointing and changed.backend == "zero2"
    # The same examples per optimizer step, in smaller micro-batches.
    assert changed.micro_batch_size * changed.grad_accum == job.micro_batch_size * job.grad_accum
    assert any(a["strategy"].endswith("_offload") for a in result.alternatives)


def test_a_change_that_moves_neither_bytes_nor_time_is_not_offered():
    """An 8B LoRA's step makes fp32 copies the size of its adapter, which the memory backward
    freed holds, and its DeepSpeed bucket is its adapter's size already: the fused AdamW and
    smaller buckets change nothing there, so no set-up lists them."""
    from tunedeck.planner.advice import ranked_setups

    job = JobSpec(max_steps=1, model="meta-llama/Meta-Llama-3-8B", method="lora", seq_len=2048)
    setups = ranked_setups(job, GpuSet(2, 24), known_shape(job.model))
    assert setups and not any("fused AdamW" in setup.changes
                              or "DeepSpeed buckets of 2e8 elements" in setup.changes
                              for setup in setups)
    outcomes = [(setup.strategy, setup.tier, setup.gpus, setup.spec.method,
                 round(setup.total_bytes), round(setup.cost.seconds, 9)) for setup in setups]
    assert len(set(outcomes)) == len(outcomes)


def test_70b_full_on_8x80_gets_fsdp_offload_and_says_nothing_else_fits():
    result, _job = plan("meta-llama/Llama-2-70b-hf", GpuSet(8, 80), method="full",
                        seq_len=2048, micro_batch_size=1)
    assert result.recommended["strategy"] == "fsdp_offload"
    assert any(reason.startswith("Nothing else fits") for reason in result.reasons)
    assert "over PCIe" in result.recommended["cost"]
    assert any("host memory" in reason for reason in result.reasons)
    kinds = {a["changes"][0] for a in result.alternatives}
    assert "qlora" in kinds  # what would fit on the GPUs, at the price of the method


def test_nothing_fits_at_all_is_said_and_changing_the_job_is_offered():
    result, _job = plan("meta-llama/Llama-2-70b-hf", GpuSet(1, 16), method="full",
                        seq_len=4096, micro_batch_size=8)
    assert result.recommended is None and result.alternatives == []
    assert result.reasons[0].startswith("Nothing fits on 1 x 16 GB")


def test_alternatives_are_different_and_each_has_its_figure_and_cost():
    result, _job = plan("meta-llama/Llama-2-7b-hf", GpuSet(8, 80), method="lora")
    assert result.recommended["strategy"] == "zero2" and result.recommended["changes"] == []
    labels = [a["label"] for a in result.alternatives]
    assert 1 <= len(labels) <= 3 and len(set(labels)) == len(labels)
    for alternative in result.alternatives:
        assert alternative["total_gb"] > 0 and alternative["fits"] in ("fits", "tight")
        # Within the tie share of the fastest, the selection guide breaks the tie.
        assert alternative["relative_step_time"] >= 0.9 and alternative["reason"].endswith(".")


def test_several_nodes_lean_to_fsdp_and_one_gpu_says_nothing_is_sharded():
    result, _job = plan("meta-llama/Llama-2-70b-hf", GpuSet(8, 80, nodes=4), method="full",
                        seq_len=2048, micro_batch_size=1, fsdp={"activation_checkpointing": True},
                        backend="fsdp")
    assert result.recommended["strategy"] == "fsdp" and result.recommended["changes"] == []
    assert any("4 nodes" in reason for reason in result.reasons)
    single, _job = plan("Qwen/Qwen2.5-7B", GpuSet(1, 24), method="qlora")
    assert single.recommended["strategy"].startswith("zero2")
    assert any("nothing is sharded" in reason for reason in single.reasons)


def example_specs() -> list:
    return [pytest.param(path, id=path.stem) for path in sorted(EXAMPLES.glob("*.yaml"))]


@pytest.mark.parametrize("path", example_specs())
def test_each_example_fits_the_cards_its_header_names(path):
    text = path.read_text()
    match = CARDS_LINE.search(text)
    assert match, f"{path.name}: no '# Planned against: N x M GB' line"
    spec = JobSpec.model_validate(yaml.safe_load(text))
    if spec.model.startswith("job:"):
        # Another job's weights have the shape of the model its chain started from, which
        # the header names (the server plans it so: tunedeck/jobs/lineage.py's base_model).
        started = re.search(r"^# Started from: (\S+)$", text, re.MULTILINE)
        assert started, f"{path.name}: a job:ID model needs a '# Started from: MODEL' line"
        spec = spec.model_copy(update={"model": started.group(1)})
    shape = resolve_model_shape(spec.model)
    count = int(match.group(1))
    assert count == spec.num_gpus, f"{path.name}: the header's GPUs are the spec's num_gpus"
    for memory in {int(match.group(2)), int(match.group(3) or match.group(2))}:
        result = plan_memory(spec, GpuSet(count, memory, spec.num_nodes), shape)
        own = spec_strategy(spec)
        assert result.verdicts[own] in ("fits", "tight"), (path.name, memory, result.reasons)
        if spec.model.startswith("builtin:"):
            continue  # the tiny model shows each backend on CPU ranks; its speed is not the point
        # A sound set-up: no more than half again the recommended one's step time.
        own_seconds = step_cost(spec, GpuSet(count, memory, spec.num_nodes), shape, own).seconds
        assert own_seconds <= 1.5 * result.recommended["step_seconds"], (path.name, memory)


def test_a_set_up_planned_for_other_gpus_than_the_specs_says_so_in_its_changes():
    result, job = plan("meta-llama/Llama-2-7b-hf", GpuSet(8, 80), method="lora", num_gpus=2)
    changed = apply_spec_changes(job, result.recommended["spec_changes"])
    assert changed.num_gpus == 8  # Apply launches the ranks the plan was made for
    nodes, job = plan("meta-llama/Llama-2-70b-hf", GpuSet(8, 80), method="full", num_gpus=8,
                      seq_len=2048, micro_batch_size=1)
    more_nodes = [a for a in nodes.alternatives if a["changes"][0].endswith("nodes")]
    assert more_nodes and all(a["spec_changes"]["num_nodes"] > 1 for a in more_nodes)


def test_every_divisor_of_the_micro_batch_is_tried_and_qlora_never_meets_fsdp():
    from tunedeck.planner.advice import verdict
    from tunedeck.planner.setups import all_setups

    job = JobSpec(max_steps=1, model="meta-llama/Llama-2-7b-hf", micro_batch_size=12)
    setups = all_setups(job, GpuSet(2, 80), known_shape(job.model), verdict)
    sizes = {s.spec.micro_batch_size for s in setups}
    assert sizes == {1, 2, 3, 4, 6, 12}
    assert all(s.spec.micro_batch_size * s.spec.grad_accum == 12 for s in setups)
    assert not [s for s in setups if s.spec.method == "qlora" and s.strategy.startswith("fsdp")]


def test_cpu_ranks_are_planned_against_ram_with_no_step_time_and_no_offload():
    """Issue 29 item 10: a host without GPUs is planned as what it has, CPU ranks sharing
    its RAM; the cost model only orders the set-ups, its seconds are a GPU's."""
    from tunedeck.planner.plan_text import plan_as_html, plan_as_text

    result, _job = plan("Qwen/Qwen2.5-7B", GpuSet(2, 40, device="cpu"), method="full",
                        seq_len=1024)
    answer = result.to_json()
    text = plan_as_text(answer) + plan_as_html(answer)
    assert answer["gpus"] == {"count": 2, "memory_gb": 40, "nodes": 1, "card": None,
                              "device": "cpu"}
    assert "1 node x 2 CPU ranks, 40 GB of RAM each. Per rank" in text
    assert "of 40 GB of RAM" in text and "per GPU" not in text
    for guess in ("H100", "GPUs per node", " a step", "recommended step time", "Step times",
                  "PCIe", "waits on"):
        assert guess not in text, guess
    assert not re.search(r"\d (s|ms|µs)\b", text)
    assert all(setup["step_seconds"] is None for setup in [answer["recommended"],
                                                             *answer["alternatives"]])
    # Offloading to host memory moves nothing off a rank that is in host memory already.
    assert {answer[name]["fits"] for name in ("zero2_offload", "fsdp_offload")} == \
        {"not supported"}
    assert not any("offload" in setup["label"] for setup in [answer["recommended"],
                                                              *answer["alternatives"]])
    # kernels auto runs plain on CPU ranks: nothing is planned with Liger's kernels.
    assert not any("Liger" in note for name in answer["strategies"] for note in answer[name]["notes"])
    # The same request on GPUs keeps its card, its step times and its offload.
    gpu_plan, _job = plan("Qwen/Qwen2.5-7B", GpuSet(2, 40), method="full", seq_len=1024)
    assert "device" not in gpu_plan.to_json()["gpus"]
    assert "a step" in plan_as_text(gpu_plan.to_json())
