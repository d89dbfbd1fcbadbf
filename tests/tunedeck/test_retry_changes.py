""""Retry with…": the spec change for each failure kind."""
import pytest

from tunedeck.job_spec import JobSpec
from tunedeck.planner.advice import _changes
from tunedeck.planner.memory_plan import GpuSet
from tunedeck.retry_changes import (SAME_SPEC, NoRetry, apply_suggestion, fallback_memory_retry,
                                    memory_retry, retried_spec, retry_change)

SPEC = JobSpec(name="job", num_gpus=2, max_steps=10, micro_batch_size=8, grad_accum=2,
               learning_rate=3e-4, precision="fp16", backend="fsdp")


def test_nan_loss_divides_the_learning_rate_by_ten_and_leaves_fp16_for_bf16():
    change = retry_change(SPEC, "nan_loss")
    assert change.label == "learning rate 3e-05 and bf16"
    assert change.spec.learning_rate == pytest.approx(3e-5) and change.spec.precision == "bf16"
    bf16 = retry_change(SPEC.model_copy(update={"precision": "bf16"}), "nan_loss")
    assert bf16.label == "learning rate 3e-05" and bf16.spec.precision == "bf16"


@pytest.mark.parametrize("kind", ["comm_timeout", "killed_by_signal", "worker_lost", "error", None])
def test_failures_that_say_nothing_against_the_spec_retry_it_unchanged(kind):
    change = retry_change(SPEC, kind)
    assert (change.label, change.spec) == (SAME_SPEC, SPEC)


def test_an_input_error_is_not_retried():
    with pytest.raises(NoRetry, match="^fix the file first: dataset /x.jsonl: no such file$"):
        retry_change(SPEC, "input_error", error="dataset /x.jsonl: no such file")


def test_out_of_memory_applies_the_planners_first_suggestion():
    change = memory_retry(SPEC)
    assert change.label == "activation checkpointing"
    assert change.spec.activation_checkpointing and change.spec.zero2.activation_checkpointing


def test_every_change_the_planner_can_suggest_maps_to_a_spec_change():
    spec = SPEC.model_copy(update={"method": "full"})
    for label, change in _changes(spec, GpuSet(count=2)):
        applied = apply_suggestion(spec, label)
        assert applied is not None, label
        if label.endswith("GPUs per node"):  # the planner doubles from its last count
            assert applied.num_gpus == int(label.split()[0])
            continue
        planned, _gpus = change(spec, GpuSet(count=2))
        qlora_backend = {"backend": "zero2"} if "zero2" in label else {}
        assert applied.model_dump() == planned.model_copy(update=qlora_backend).model_dump()
    assert apply_suggestion(spec, "activation checkpointing + 4 GPUs per node").num_gpus == 4
    assert apply_suggestion(spec, "buy a bigger card") is None


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
    assert retried_spec(unnamed, retry_change(unnamed, None)).name == "lora-fsdp (retry: same spec)"
