"""Objective dpo in the memory planner: two sequences per pair (the activations of twice the
rows, whole logits even with Liger's kernels), a frozen reference copy for a full fine-tune
with reference auto (held as the backend holds the weights) and none otherwise, the advice
offering reference precomputed where the copy does not fit, and the count against what
autograd keeps in the trainer's own DPO objective. Golden DPO plans: test_memory_plan.py."""
import copy

import pytest
import torch

from tests.tunedeck.planner.live_bytes import LiveBytes
from tests.tunedeck.planner.test_activation_bytes import SIZES, TOLERANCE, family_model
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.activation_memory import (activation_bytes, layer_activation_bytes,
                                                logits_bytes)
from tunedeck.planner.advice import plan_memory, ranked_setups
from tunedeck.planner.architectures import shape_from_config
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import plan_strategies
from tunedeck.planner.plan_text import plan_as_text
from tunedeck.planner.setups import ON_GPUS, all_setups, apply_spec_changes
from tunedeck.planner.shape_source import known_shape
from tunedeck.planner.step_cost import step_cost

MODEL = "meta-llama/Llama-3.1-8B"
LLAMA_31_8B = known_shape(MODEL)
EIGHT_H100 = GpuSet(8, 80)


def job(**fields) -> JobSpec:
    return JobSpec.model_validate({"max_steps": 1, "model": MODEL, "seq_len": 2048,
                                   "micro_batch_size": 2, **fields})


@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_dpo_doubles_the_activation_term_against_the_same_sft_spec(method, checkpointing):
    """Two pairs a micro-batch are one forward of four rows: every term (the layers, the
    final norm, the logits' three fp32 copies, the padded rows' mask) is the SFT spec's at
    four rows; the model states do not change (a full fine-tune's weights gain the frozen
    reference copy, counted apart below)."""
    sft = job(method=method, kernels="none", zero2={"activation_checkpointing": checkpointing})
    dpo = job(method=method, kernels="none", objective="dpo",
              zero2={"activation_checkpointing": checkpointing})
    assert activation_bytes(dpo, LLAMA_31_8B) == 2 * activation_bytes(sft, LLAMA_31_8B)
    sft_plan, dpo_plan = (plan_strategies(spec, EIGHT_H100, LLAMA_31_8B)["zero2"]
                          for spec in (sft, dpo))
    assert dpo_plan.breakdown.activations == 2 * sft_plan.breakdown.activations
    assert (dpo_plan.breakdown.params - dpo_plan.reference_bytes, dpo_plan.breakdown.grads,
            dpo_plan.breakdown.optimizer) == \
        (sft_plan.breakdown.params, sft_plan.breakdown.grads, sft_plan.breakdown.optimizer)


def test_under_dpo_ligers_other_kernels_count_but_its_fused_loss_does_not():
    """The answers' log-probs need whole logits: Liger's fused cross-entropy is not used,
    so dpo counts the plain loss's three fp32 copies of four rows' logits, while the
    layers keep Liger's (a bf16 norm input, no SiLU output)."""
    sft_liger, dpo_liger = job(kernels="liger"), job(kernels="liger", objective="dpo")
    sft_plain = job(kernels="none")
    assert logits_bytes(dpo_liger, LLAMA_31_8B) == 2 * logits_bytes(sft_plain, LLAMA_31_8B) \
        == 4 * 2048 * LLAMA_31_8B.vocab_size * 12
    assert logits_bytes(sft_liger, LLAMA_31_8B) < logits_bytes(sft_plain, LLAMA_31_8B) / 10
    assert layer_activation_bytes(dpo_liger, LLAMA_31_8B) == \
        2 * layer_activation_bytes(sft_liger, LLAMA_31_8B)


def test_a_full_fine_tune_with_reference_auto_holds_a_frozen_copy_as_its_backend_holds_weights():
    """Llama-3.1-8B in bf16: a 16.1 GB copy, no gradients, no optimizer state. ZeRO-2 shards
    no parameters (the whole copy on each GPU, with or without its optimizer offload);
    FSDP shards it over the 8 ranks (2 GB each), and with CPU offload its shards are in
    host memory with the weights. Reference precomputed holds none."""
    auto = job(method="full", objective="dpo")
    precomputed = job(method="full", objective="dpo", dpo={"reference": "precomputed"})
    whole = 2 * LLAMA_31_8B.total_parameters
    held = plan_strategies(auto, EIGHT_H100, LLAMA_31_8B)
    none = plan_strategies(precomputed, EIGHT_H100, LLAMA_31_8B)
    expected = {"ddp": whole, "zero2": whole, "zero2_offload": whole, "fsdp": whole / 8,
                "fsdp_offload": 0.0}
    for name, reference in expected.items():
        assert held[name].reference_bytes == pytest.approx(reference), name
        assert none[name].reference_bytes == 0.0, name
        with_copy, without = held[name].breakdown, none[name].breakdown
        assert with_copy.params - without.params == pytest.approx(reference), name
        assert (with_copy.grads, with_copy.optimizer, with_copy.activations) == \
            (without.grads, without.optimizer, without.activations), name
    assert held["fsdp_offload"].host_bytes_per_node - none["fsdp_offload"].host_bytes_per_node \
        == pytest.approx(whole)  # 8 ranks of the node, an eighth each
    assert held["zero2_offload"].host_bytes_per_node == none["zero2_offload"].host_bytes_per_node


@pytest.mark.parametrize("method, dpo", [
    ("full", {"reference": "precomputed"}), ("full", {"loss": "simpo"}), ("full", {"loss": "orpo"}),
    ("lora", {}), ("lora", {"reference": "precomputed"}), ("qlora", {}),
])
def test_no_reference_weights_without_a_frozen_copy(method, dpo):
    """A LoRA/QLoRA reference is the base with the adapter off; precomputed keeps a few
    bytes a pair; simpo and orpo have no reference: the weights are the SFT spec's."""
    sft = plan_strategies(job(method=method), EIGHT_H100, LLAMA_31_8B)
    plans = plan_strategies(job(method=method, objective="dpo", dpo=dpo), EIGHT_H100, LLAMA_31_8B)
    for name, plan in plans.items():
        assert plan.reference_bytes == 0.0
        assert plan.breakdown.params == sft[name].breakdown.params
        assert plan.host_bytes_per_node == sft[name].host_bytes_per_node


LLAMA_32_3B = known_shape("meta-llama/Llama-3.2-3B")


def full_3b_dpo(seq_len: int) -> JobSpec:
    return JobSpec(max_steps=1, model=LLAMA_32_3B.name, objective="dpo", method="full",
                   num_gpus=1, seq_len=seq_len, micro_batch_size=1)


def test_a_full_dpo_whose_frozen_copy_does_not_fit_is_offered_reference_precomputed():
    """Llama-3.2-3B full on one 80 GB GPU at seq 2048: with the copy (6.4 GB beside 16 bytes
    a parameter) nothing on the GPU alone fits with a margin, whatever the backend,
    checkpointing or micro-batch; without it ZeRO-2 does, before any offloaded set-up."""
    auto = full_3b_dpo(2048)
    on_gpus = [setup for setup in ranked_setups(auto, GpuSet(1, 80), LLAMA_32_3B)
               if setup.tier == ON_GPUS and setup.verdict == "fits"]
    assert on_gpus and all(setup.precomputes_reference for setup in on_gpus)
    best = plan_memory(auto, GpuSet(1, 80), LLAMA_32_3B).recommended
    assert best["fits"] == "fits" and not best["strategy"].endswith("_offload")
    assert "reference precomputed" in best["changes"]
    assert best["spec_changes"]["dpo.reference"] == "precomputed"
    assert "a forward pass over the pairs before step 1" in best["cost"]
    assert apply_spec_changes(auto, best["spec_changes"]).dpo.reference == "precomputed"


def test_precomputed_is_recommended_where_auto_fits_only_more_slowly():
    """At seq 1024 the copy fits beside the model only with activation checkpointing (a
    recomputed forward); precomputed fits without it, faster by more than a tie."""
    from tunedeck.planner.advice import TIE_SHARE

    setups = ranked_setups(full_3b_dpo(1024), GpuSet(1, 80), LLAMA_32_3B)
    best = setups[0]
    assert best.precomputes_reference and not best.spec.activation_checkpointing
    auto = [setup for setup in setups if setup.tier == ON_GPUS and setup.verdict == "fits"
            and not setup.precomputes_reference]
    assert auto and all(setup.spec.activation_checkpointing
                        and setup.cost.seconds > TIE_SHARE * best.cost.seconds
                        for setup in auto)


def test_reference_auto_is_kept_where_it_fits_and_precomputed_costs_the_same_step():
    """8 x 80 GB, FSDP: the copy is 2 GB a GPU and fits; a precomputed set-up fits too, at
    the same step time (its pass before step 1 is the forward auto runs, charged alike),
    and the tie goes to auto."""
    auto = job(method="full", objective="dpo", backend="fsdp", micro_batch_size=1,
               fsdp={"activation_checkpointing": True})
    precomputed = apply_spec_changes(auto, {"dpo.reference": "precomputed"})
    result = plan_memory(auto, EIGHT_H100, LLAMA_31_8B)
    assert "dpo.reference" not in result.recommended["spec_changes"]
    assert any(setup.precomputes_reference and setup.verdict == "fits"
               for setup in ranked_setups(auto, EIGHT_H100, LLAMA_31_8B))
    for strategy in ("zero2", "fsdp"):
        assert step_cost(auto, EIGHT_H100, LLAMA_31_8B, strategy).seconds == pytest.approx(
            step_cost(precomputed, EIGHT_H100, LLAMA_31_8B, strategy).seconds)


@pytest.mark.parametrize("spec", [
    job(method="full", objective="dpo", dpo={"reference": "precomputed"}),
    job(method="lora", objective="dpo"),
    job(method="full", objective="dpo", dpo={"loss": "simpo"}),
    job(method="full"),
], ids=["precomputed-already", "lora", "simpo", "sft"])
def test_precomputed_is_offered_only_to_a_job_that_holds_a_frozen_copy(spec):
    from tunedeck.planner.advice import verdict

    setups = all_setups(spec, GpuSet(2, 80), LLAMA_31_8B, verdict)
    assert setups and not [setup for setup in setups if "dpo.reference" in setup.spec_changes]


def test_the_step_cost_counts_two_rows_a_pair_and_the_references_forward():
    """Two pairs without a reference (simpo) cost what four SFT rows cost; a reference adds
    its forward of those rows (2 FLOPs a weight, no backward)."""
    four_rows = step_cost(job(method="full", micro_batch_size=4), EIGHT_H100, LLAMA_31_8B, "zero2")
    simpo = step_cost(job(method="full", objective="dpo", dpo={"loss": "simpo"}), EIGHT_H100,
                      LLAMA_31_8B, "zero2")
    sigmoid = step_cost(job(method="full", objective="dpo"), EIGHT_H100, LLAMA_31_8B, "zero2")
    assert simpo.compute_s == pytest.approx(four_rows.compute_s) and simpo.reference_s == 0
    assert sigmoid.compute_s - simpo.compute_s == pytest.approx(sigmoid.reference_s)
    # A forward of the 6 x the matmul weights a token's step costs, plus attention's share.
    assert 0.3 < sigmoid.reference_s / simpo.compute_s < 0.36


def test_the_plan_says_how_dpo_is_counted_and_an_sft_plans_json_is_as_it_was():
    dpo = plan_memory(job(method="full", objective="dpo", backend="zero2"), EIGHT_H100,
                      LLAMA_31_8B).to_json()
    assert dpo["dpo"] == {"rows_per_micro_batch": 4, "loss": "sigmoid",
                          "reference": "frozen copy"}
    assert dpo["zero2"]["reference_gb"] == pytest.approx(16.06, abs=0.01)
    assert dpo["fsdp"]["reference_gb"] == pytest.approx(2.008, abs=0.001)
    assert "two sequences per pair: activations doubled" in plan_as_text(dpo)
    assert "frozen copy of the weights" in plan_as_text(dpo)
    assert all(any("two sequences per pair: activations doubled" in note
                   for note in dpo[name]["notes"]) for name in dpo["strategies"])
    sft = plan_memory(job(method="full", backend="zero2"), EIGHT_H100, LLAMA_31_8B).to_json()
    assert "dpo" not in sft and not any("reference_gb" in sft[name] for name in sft["strategies"])
    assert "two sequences" not in plan_as_text(sft)


def measured_dpo_peak(method: str, spec: JobSpec, family: str = "llama") -> tuple[int, float]:
    """(live bytes at the peak of one micro-batch of the trainer's DPO objective, forward
    with its reference and backward, on CPU; the planned activations)."""
    from tests.tunedeck.planner.test_activation_bytes import SEQ_LEN
    from trainer.model.method import apply_method, set_training_mode, uses_adapter
    from trainer.objectives.dpo import PAIR_WEIGHTS, DpoObjective

    model, config = family_model(family)
    shape = shape_from_config(family, config.to_dict())
    frozen = (copy.deepcopy(model).to(torch.bfloat16).requires_grad_(False).eval()
              if method == "full" and spec.uses_reference_model else None)
    model = apply_method(model, spec).to(torch.bfloat16)
    set_training_mode(model, spec)
    objective = DpoObjective(spec, adapter=uses_adapter(spec), reference_model=frozen)
    pairs = spec.micro_batch_size
    ids = torch.randint(0, SIZES["vocab_size"], (2 * pairs, SEQ_LEN))
    labels = ids.clone()
    labels[:, :SEQ_LEN // 4] = -100  # the prompt's tokens
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
             PAIR_WEIGHTS: torch.ones(pairs)}
    for parameter in model.parameters():
        if parameter.requires_grad:
            parameter.register_post_accumulate_grad_hook(lambda weight: setattr(weight, "grad", None))
    weights = [*model.parameters(), *model.buffers(), *(frozen.parameters() if frozen else ())]
    counter = LiveBytes(existing=weights)
    with counter:
        loss, _figures = objective.loss(model, batch, loss_weight=1.0)
        loss.backward()
    # Every row is SEQ_LEN long: no padding, no mask (the benches' full rows).
    return counter.peak, activation_bytes(spec, shape, full_rows=True)


@pytest.mark.parametrize("method, loss, pairs, checkpointing", [
    ("lora", "sigmoid", 1, False),  # the reference: the adapter off, under no_grad
    ("full", "sigmoid", 1, True),  # the reference: a frozen copy, under no_grad
    ("full", "simpo", 2, False),  # no reference; two pairs, four rows
])
def test_the_planned_dpo_activations_are_what_autograd_keeps(method, loss, pairs, checkpointing):
    """The reference's forward runs first and frees what it made: the peak is the policy's
    four rows' (or two) activations and its fp32 log-softmax, as planned."""
    from tests.tunedeck.planner.test_activation_bytes import SEQ_LEN

    spec = JobSpec(max_steps=1, method=method, objective="dpo", micro_batch_size=pairs,
                   seq_len=SEQ_LEN, precision="bf16", kernels="none", lora={"dropout": 0.0},
                   dpo={"loss": loss}, zero2={"activation_checkpointing": checkpointing})
    measured, planned = measured_dpo_peak(method, spec)
    assert measured / planned == pytest.approx(1.0, abs=TOLERANCE)
