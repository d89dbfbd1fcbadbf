""""Retry with…": the spec change for each failure kind."""
import re

import pytest

from tunedeck.spec.job_spec import JobSpec, model_stem
from tunedeck.planner.setups import apply_spec_changes
from tunedeck.jobs.retry_changes import (SAME_SPEC, NoRetry, fallback_memory_retry, memory_retry,
                                    planner_setups, retried_spec, retry_change)

SPEC = JobSpec(name="job", num_gpus=2, max_steps=10, micro_batch_size=8, grad_accum=2,
               learning_rate=3e-4, precision="fp16", backend="fsdp")


def test_nan_loss_divides_the_learning_rate_by_ten_and_leaves_fp16_for_bf16():
    change = retry_change(SPEC, "nan_loss")
    assert change.label == "learning rate 3e-05 and bf16"
    assert change.spec.learning_rate == pytest.approx(3e-5) and change.spec.precision == "bf16"
    bf16 = retry_change(SPEC.model_copy(update={"precision": "bf16"}), "nan_loss")
    assert bf16.label == "learning rate 3e-05" and bf16.spec.precision == "bf16"


@pytest.mark.parametrize("kind", ["comm_timeout", "killed_by_signal", "worker_lost", "disk_full",
                                  "error", None])
def test_failures_that_say_nothing_against_the_spec_retry_it_unchanged(kind):
    change = retry_change(SPEC, kind)
    assert (change.label, change.spec) == (SAME_SPEC, SPEC)


def test_an_input_error_is_not_retried():
    with pytest.raises(NoRetry, match="^fix the file first: dataset /x.jsonl: no such file$"):
        retry_change(SPEC, "input_error", error="dataset /x.jsonl: no such file")


def test_a_hub_id_not_cached_offline_is_not_retried_and_not_called_a_file_to_fix():
    error = "model org/absent: not in this host's Hugging Face cache (...)"
    with pytest.raises(NoRetry, match=f"^nothing to change in the spec: {re.escape(error)}$"):
        retry_change(SPEC, "not_cached_offline", error=error)


def test_out_of_memory_applies_the_planners_best_set_up_that_changes_the_spec():
    from tunedeck.planner.gpu_cards import GpuSet
    from tunedeck.planner.memory_plan import plan_strategies
    from tunedeck.planner.shape_source import resolve_model_shape

    change = memory_retry(SPEC)
    best = next(setup for setup in planner_setups(SPEC) if setup["strategy"] == "fsdp")
    assert change.label == best["label"] and best["spec_changes"]
    shape, gpus = resolve_model_shape(SPEC.model), GpuSet(2)
    before = plan_strategies(SPEC, gpus, shape)["fsdp"].breakdown.total
    after = plan_strategies(change.spec, gpus, shape)[best["strategy"]].breakdown.total
    assert after < before
    # The same examples per optimizer step, however the micro-batch changed.
    assert (change.spec.micro_batch_size * change.spec.grad_accum
            == SPEC.micro_batch_size * SPEC.grad_accum)


def test_every_set_up_the_planner_offers_applies_to_the_spec():
    spec = SPEC.model_copy(update={"method": "full"})
    setups = planner_setups(spec)
    assert setups
    for setup in setups:
        applied = apply_spec_changes(spec, setup["spec_changes"] | {"num_nodes": 1})
        assert applied.backend == setup["backend"]
        for key, value in setup["spec_changes"].items():
            section, _, name = key.rpartition(".")
            if key != "num_nodes":
                assert getattr(getattr(applied, section) if section else applied, name) == value
    with pytest.raises(ValueError, match="micro_batch_size"):
        apply_spec_changes(spec, {"micro_batch_size": 0})


def test_without_a_suggestion_checkpointing_then_half_the_micro_batch_then_offload():
    first = fallback_memory_retry(SPEC)
    assert first.label == "activation checkpointing"
    second = fallback_memory_retry(first.spec)
    assert second.label == "micro-batch 4, grad_accum 4"
    assert (second.spec.micro_batch_size, second.spec.grad_accum) == (4, 4)
    small = first.spec.model_copy(update={"micro_batch_size": 1})
    assert fallback_memory_retry(small).spec.fsdp.cpu_offload
    assert fallback_memory_retry(small.model_copy(update={"backend": "zero2"})).spec.zero2.offload_optimizer


def test_a_model_the_planner_cannot_size_falls_back():
    spec = SPEC.model_copy(update={"model": "/nowhere/model"})
    assert memory_retry(spec).label == "activation checkpointing"


def test_the_retried_spec_is_validated_and_named_for_the_change():
    spec = retried_spec(SPEC, retry_change(SPEC, "nan_loss"))
    assert spec.name == "job (retry: learning rate 3e-05 and bf16)"
    unnamed = SPEC.model_copy(update={"name": None})
    assert retried_spec(unnamed, retry_change(unnamed, None)).name == \
        f"{model_stem(SPEC.model)}-lora-fsdp (retry: same spec)"


def test_an_out_of_memory_retry_never_changes_the_method_or_the_gpus():
    for backend in ("zero2", "fsdp"):
        spec = JobSpec(max_steps=1, model="meta-llama/Llama-2-7b-hf", num_gpus=2,
                       micro_batch_size=1, backend=backend, zero2={"offload_optimizer": True},
                       fsdp={"cpu_offload": True, "activation_checkpointing": True})
        change = memory_retry(spec)
        assert (change.spec.method, change.spec.num_gpus, change.spec.num_nodes) == ("lora", 2, 1)


@pytest.mark.parametrize("failure_kind", ["out_of_memory", "nan_loss", "timeout"])
def test_a_dpo_jobs_retry_keeps_its_objective_and_preference_settings(failure_kind):
    spec = SPEC.model_copy(update={"objective": "dpo", "dataset": "builtin:arithmetic-preference",
                                   "dpo": SPEC.dpo.model_copy(update={"beta": 0.3,
                                                                      "loss": "ipo"})})
    retried = retried_spec(spec, retry_change(spec, failure_kind))
    assert retried.objective == "dpo" and retried.dpo == spec.dpo
    assert retried.dataset == spec.dataset


def test_a_grpo_job_out_of_memory_retries_with_a_smaller_round():
    grpo = JobSpec.model_validate({"objective": "grpo", "dataset": "builtin:arithmetic-rl",
                                   "max_steps": 5, "micro_batch_size": 16, "seq_len": 512,
                                   "zero2": {"activation_checkpointing": True},
                                   "fsdp": {"activation_checkpointing": True}})
    first = fallback_memory_retry(grpo)
    assert first.label == "micro-batch 8 (a round of 8 completions)"
    assert (first.spec.micro_batch_size, first.spec.grad_accum) == (8, 1)
    second = fallback_memory_retry(first.spec)  # 4 completions cannot hold a group of 8
    assert second.label == "grpo.max_completion_length 128"
    assert second.spec.grpo.max_completion_length == 128 and second.spec.micro_batch_size == 8
    retried_spec(grpo, second)  # a valid spec
