""""Retry with…": the change to a failed job's spec that would help, by why it failed.

Pure: a spec and a failure kind in, a new spec and the words for the change out. For out of
memory, the memory planner's first suggestion, planned against a card exactly as large as
the planner says this job needs (the job did not fit, so the real card was no larger).
"""
from __future__ import annotations

from dataclasses import dataclass

from tunedeck.backends import backend_of
from tunedeck.jobs.failure_kinds import INPUT_ERROR, NAN_LOSS, NOT_CACHED_OFFLINE, OUT_OF_MEMORY
from tunedeck.spec.job_spec import JobSpec
from tunedeck.units import GB

SAME_SPEC = "same spec"
# What a retry leaves to the user: the job itself and the hardware it asked for.
RETRY_NEVER_CHANGES = {"method", "num_gpus", "num_nodes"}
NAN_LEARNING_RATE_DIVISOR = 10
NOT_CACHED_WORDS = ("a Hugging Face id is not in the host's cache and HF_HUB_OFFLINE=1 "
                    "forbids downloading it")


class NoRetry(Exception):
    """The failure needs the user's hand (a file to fix), not a new launch."""


@dataclass(frozen=True)
class RetryChange:
    label: str  # "activation checkpointing", for the button and the new job's name
    spec: JobSpec


def retry_change(spec: JobSpec, failure_kind: str | None, *, error: str | None = None) -> RetryChange:
    if failure_kind == INPUT_ERROR:
        raise NoRetry(f"fix the file first: {error or 'a model or dataset file is missing or malformed'}")
    if failure_kind == NOT_CACHED_OFFLINE:
        # The spec is right; the host's cache is not. The error says how to fill it.
        raise NoRetry(f"nothing to change in the spec: {error or NOT_CACHED_WORDS}")
    if failure_kind == OUT_OF_MEMORY:
        return memory_retry(spec)
    if failure_kind == NAN_LOSS:
        return nan_retry(spec)
    # A timeout, a kill, a lost worker or a full disk says nothing against the spec: run it
    # again. (A retry of a disk-full job waits in the queue until the disk has room for it:
    # worker/disk_room.py.)
    return RetryChange(SAME_SPEC, spec)


def retried_spec(spec: JobSpec, change: RetryChange) -> JobSpec:
    """The new job's spec, validated again (a copy skips validation), named for the change."""
    data = change.spec.model_dump(mode="json")
    data["name"] = retry_name(spec.display_name, change.label)
    return JobSpec.model_validate(data)


def nan_retry(spec: JobSpec) -> RetryChange:
    learning_rate = spec.learning_rate / NAN_LEARNING_RATE_DIVISOR
    update: dict = {"learning_rate": learning_rate}
    label = f"learning rate {learning_rate:g}"
    if spec.precision == "fp16":  # fp16 overflows where bf16, with fp32's range, does not
        update["precision"] = "bf16"
        label += " and bf16"
    return RetryChange(label, spec.model_copy(update=update))


def memory_retry(spec: JobSpec) -> RetryChange:
    """The planner's best set-up that changes the spec without changing the job or its
    GPUs (no other method, no more GPUs or nodes), planned against a card just as large as
    this job's planned need; under the job's own backend when one fits, as a retry should
    change no more than it must."""
    from tunedeck.planner.memory_plan import spec_strategy
    from tunedeck.planner.setups import apply_spec_changes

    setups = planner_setups(spec)
    own = spec_strategy(spec)
    for setup in sorted(setups, key=lambda setup: setup["strategy"] != own):
        changes = setup["spec_changes"]
        if changes and not RETRY_NEVER_CHANGES & set(changes):
            changed = apply_spec_changes(spec, changes)
            if _valid(changed):  # a batch GRPO's groups no longer divide is no retry
                return RetryChange(setup["label"], changed)
    return fallback_memory_retry(spec)


def _valid(spec: JobSpec) -> bool:
    from pydantic import ValidationError

    try:
        JobSpec.model_validate(spec.model_dump(mode="json"))
    except ValidationError:
        return False
    return True


def planner_setups(spec: JobSpec) -> list[dict]:
    """Every set-up that fits a card just as large as this job's planned need (the job did
    not fit, so the real card was no larger), best first, as plan JSON."""
    from tunedeck.planner.advice import RUNTIME_RESERVE_BYTES, ranked_setups, setup_json
    from tunedeck.planner.gpu_cards import GpuSet
    from tunedeck.planner.memory_plan import spec_plan
    from tunedeck.planner.shape_source import resolve_model_shape

    try:
        shape = resolve_model_shape(spec.model)
    except ValueError:
        return []  # a model whose shape cannot be found: the fallback still helps
    gpus = GpuSet(count=spec.num_gpus, nodes=spec.num_nodes)
    needed_bytes = spec_plan(spec, gpus, shape).breakdown.total
    card = GpuSet(spec.num_gpus, (needed_bytes + RUNTIME_RESERVE_BYTES) / GB, spec.num_nodes)
    ranked = ranked_setups(spec, card, shape)
    reference = ranked[0].cost.seconds if ranked else 0.0
    return [setup_json(setup, reference, spec, card) for setup in ranked]


def with_activation_checkpointing(spec: JobSpec) -> JobSpec:
    return spec.model_copy(update={
        "zero2": spec.zero2.model_copy(update={"activation_checkpointing": True}),
        "fsdp": spec.fsdp.model_copy(update={"activation_checkpointing": True})})


def fallback_memory_retry(spec: JobSpec) -> RetryChange:
    """Without a planner suggestion: checkpointing, then half the micro-batch (the same
    examples per step through twice the accumulation), then offload."""
    if not spec.activation_checkpointing:
        return RetryChange("activation checkpointing", with_activation_checkpointing(spec))
    if spec.objective == "grpo" and (retry := _smaller_round(spec)) is not None:
        return retry
    if spec.micro_batch_size > 1:
        half = spec.micro_batch_size // 2
        return RetryChange(f"micro-batch {half}, grad_accum {spec.grad_accum * 2}",
                           spec.model_copy(update={"micro_batch_size": half,
                                                   "grad_accum": spec.grad_accum * 2}))
    backend = backend_of(spec)
    return RetryChange(backend.offload_words, backend.with_offload(spec))


def _smaller_round(spec: JobSpec) -> RetryChange | None:
    """GRPO's sampling holds its whole round at once (micro_batch_size × grad_accum rows),
    so halving the micro-batch through more accumulation saves it nothing: half the round
    where the groups still divide it, else half the completion length."""
    half = spec.micro_batch_size // 2
    generations = spec.grpo.num_generations
    if half >= 1 and (half * spec.grad_accum) % generations == 0:
        return RetryChange(f"micro-batch {half} (a round of {half * spec.grad_accum} "
                           "completions)", spec.model_copy(update={"micro_batch_size": half}))
    completion = spec.grpo.max_completion_length // 2
    if completion >= 16:
        return RetryChange(f"grpo.max_completion_length {completion}", spec.model_copy(update={
            "grpo": spec.grpo.model_copy(update={"max_completion_length": completion})}))
    return None


def retry_name(name: str, label: str) -> str:
    return f"{name} (retry: {label})"[:200]
