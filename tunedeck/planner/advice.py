"""From bytes to advice: a verdict per strategy, the recommended backend and why, and when
nothing fits, the cheapest changes that would (each with its new figure).

The recommendation follows the selection guide: under ~13B with LoRA/QLoRA, ZeRO-2;
13B and up with a full fine-tune, FSDP with activation checkpointing; 16-32 GB cards,
ZeRO-2 with optimizer offload; several nodes, FSDP. Within that order the first strategy
that fits wins.
"""
from __future__ import annotations

from tunedeck.job_spec import JobSpec
from tunedeck.planner.memory_plan import GB, GpuSet, MemoryPlan, StrategyPlan, model_states, plan_strategies
from tunedeck.planner.model_shapes import ModelShape

FITS, TIGHT, DOES_NOT_FIT, NOT_SUPPORTED = "fits", "tight", "does not fit", "not supported"
# CUDA context, NCCL and allocator slack no tensor accounts for.
RUNTIME_RESERVE_BYTES = 1.5 * GB
# Below this share of what is left, a plan "fits"; up to all of it, it is "tight".
COMFORTABLE_SHARE = 0.85
LARGE_MODEL_PARAMETERS = 13e9
SMALL_CARD_GB = 32
MAX_GPUS_PER_NODE = 8
# DeepSpeed's advice for small cards: 2e8-element buckets cost 3.6 GB with overlap_comm.
SMALL_BUCKET_ELEMENTS = 200_000_000


def plan_memory(spec: JobSpec, gpus: GpuSet, shape: ModelShape, *,
                with_suggestions: bool = True) -> MemoryPlan:
    strategies = plan_strategies(spec, gpus, shape)
    verdicts = {name: verdict(plan, gpus) for name, plan in strategies.items()}
    recommended, reasons = recommend(spec, gpus, shape, strategies, verdicts)
    states = model_states(spec, shape)
    plan = MemoryPlan(model=shape.name, parameters=states.parameters,
                      trainable_parameters=states.trainable, gpus=gpus, strategies=strategies,
                      verdicts=verdicts, recommended=recommended, reasons=reasons)
    if with_suggestions and _worth_changing(spec, gpus, shape, recommended, verdicts):
        plan.suggestions.extend(cheapest_changes(spec, gpus, shape))
    return plan


def _worth_changing(spec: JobSpec, gpus: GpuSet, shape: ModelShape, recommended: str | None,
                    verdicts: dict[str, str]) -> bool:
    """Suggest changes when nothing fits, when it is tight, or when only a strategy far down
    the guide's order fits (e.g. full offload where ZeRO-2 was the natural choice)."""
    if recommended is None or verdicts[recommended] != FITS:
        return True
    order, _why = preference(spec, gpus, shape)
    return recommended not in order[:2]


def verdict(plan: StrategyPlan, gpus: GpuSet) -> str:
    if not plan.supported:
        return NOT_SUPPORTED
    usable = gpus.memory_gb * GB - RUNTIME_RESERVE_BYTES
    if plan.breakdown.total <= COMFORTABLE_SHARE * usable:
        return FITS
    return TIGHT if plan.breakdown.total <= usable else DOES_NOT_FIT


def preference(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> tuple[list[str], str]:
    """The guide's order of strategies for this job, and the sentence that explains it."""
    billions = shape.total_parameters / 1e9
    if gpus.nodes > 1:
        return (["fsdp", "fsdp_offload", "zero2", "zero2_offload"],
                f"{gpus.nodes} nodes: FSDP shards the weights too, so memory per GPU falls as "
                "nodes are added; it is FSDP's home")
    if spec.method == "full" and shape.total_parameters >= LARGE_MODEL_PARAMETERS:
        return (["fsdp", "fsdp_offload", "zero2", "zero2_offload"],
                f"a full fine-tune of {billions:.0f}B parameters: every ZeRO-2 rank would hold "
                "all the weights, FSDP shards them (with activation checkpointing)")
    if gpus.memory_gb <= SMALL_CARD_GB:
        return (["zero2", "zero2_offload", "fsdp", "fsdp_offload"],
                f"{gpus.memory_gb:g} GB cards: ZeRO-2, with the optimizer offloaded to host "
                "memory when it does not fit on the card")
    return (["zero2", "fsdp", "zero2_offload", "fsdp_offload"],
            f"{billions:.1f}B parameters with {spec.method}: ZeRO-2 is the sweet spot (no "
            "parameter all-gather in forward, low communication, stable)")


def recommend(spec: JobSpec, gpus: GpuSet, shape: ModelShape,
              strategies: dict[str, StrategyPlan], verdicts: dict[str, str]) -> tuple[str | None, list[str]]:
    order, why = preference(spec, gpus, shape)
    chosen = next((name for name in order if verdicts[name] == FITS), None)
    chosen = chosen or next((name for name in order if verdicts[name] == TIGHT), None)
    reasons = [f"{why}."]
    if chosen is None:
        reasons.append(f"Nothing fits on {gpus.world_size} x {gpus.memory_gb:g} GB; see the "
                       "suggested changes.")
        return None, reasons
    total = strategies[chosen].breakdown.total / GB
    reasons.append(f"{chosen} needs {total:.1f} GB per GPU of {gpus.memory_gb:g} GB "
                   f"({verdicts[chosen]}).")
    if chosen != order[0]:
        first = strategies[order[0]].breakdown.total / GB
        reasons.append(f"{order[0]} would need {first:.1f} GB per GPU ({verdicts[order[0]]}).")
    if strategies[chosen].host_bytes_per_node:
        reasons.append(f"{chosen} also needs {strategies[chosen].host_bytes_per_node / GB:.1f} GB "
                       "of host memory per node.")
    if gpus.world_size == 1:
        reasons.append("With one GPU nothing is sharded: ZeRO-2 and FSDP save memory only "
                       "through offload.")
    reasons.append("ZeRO-2 is counted as in the ZeRO paper (2P + 14P/N bytes); DeepSpeed's "
                   "estimator says 2P + 18P/N because it also counts an fp32 gradient "
                   "partition that lives only during the optimizer step, after the "
                   "activations are freed.")
    return chosen, reasons


def cheapest_changes(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> list[dict]:
    """Changes that make the job fit, cheapest first, each with the best strategy's figure.
    Changes accumulate (checkpointing, then a smaller micro-batch, ...) until one fits."""
    suggestions: list[dict] = []
    current_spec, current_gpus, applied = spec, gpus, []
    for label, change in _changes(spec, gpus):
        current_spec, current_gpus = change(current_spec, current_gpus)
        applied.append(label)
        best = _best_fitting(current_spec, current_gpus, shape)
        if best is not None:
            name, total = best
            suggestions.append({"change": " + ".join(applied), "backend": name,
                                "total_gb": round(total / GB, 3), "fits": FITS})
            if len(suggestions) >= 3:
                break
            current_spec, current_gpus, applied = spec, gpus, []  # next: a different change
    return suggestions


def _best_fitting(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> tuple[str, float] | None:
    """The guide's first strategy that fits after a change, with its total bytes."""
    strategies = plan_strategies(spec, gpus, shape)
    order, _why = preference(spec, gpus, shape)
    for name in order:
        if verdict(strategies[name], gpus) == FITS:
            return name, strategies[name].breakdown.total
    return None


def _changes(spec: JobSpec, gpus: GpuSet):
    def with_checkpointing(s, g):
        return s.model_copy(update={
            "zero2": s.zero2.model_copy(update={"activation_checkpointing": True}),
            "fsdp": s.fsdp.model_copy(update={"activation_checkpointing": True})}), g

    def with_micro_batch_one(s, g):
        # Same examples per optimizer step: what the micro-batch loses, accumulation gains.
        return s.model_copy(update={"micro_batch_size": 1,
                                    "grad_accum": s.grad_accum * s.micro_batch_size}), g

    def with_small_buckets(s, g):
        return s.model_copy(update={"zero2": s.zero2.model_copy(update={
            "reduce_bucket_size": SMALL_BUCKET_ELEMENTS,
            "allgather_bucket_size": SMALL_BUCKET_ELEMENTS})}), g

    def with_method(method):
        return lambda s, g: (s.model_copy(update={"method": method}), g)

    def with_gpus(count):
        return lambda s, g: (s, GpuSet(count, g.memory_gb, g.nodes))

    if not spec.activation_checkpointing:
        yield "activation checkpointing", with_checkpointing
    # DeepSpeed's buckets are a ZeRO-2 knob: an FSDP spec's retry would not feel them.
    if spec.backend == "zero2" and max(spec.zero2.reduce_bucket_size,
                                       spec.zero2.allgather_bucket_size) > SMALL_BUCKET_ELEMENTS:
        yield "DeepSpeed buckets of 2e8 elements", with_small_buckets
    if spec.micro_batch_size > 1:
        yield "micro-batch 1 (more gradient accumulation)", with_micro_batch_one
    if spec.method == "full":
        yield "method lora", with_method("lora")
    if spec.method in ("full", "lora"):
        yield "method qlora (zero2)", with_method("qlora")
    count = gpus.count
    while count < MAX_GPUS_PER_NODE:
        count = min(MAX_GPUS_PER_NODE, count * 2)
        yield f"{count} GPUs per node", with_gpus(count)
