"""From bytes to advice: a verdict per strategy, and the fastest set-up that fits.

Every set-up of tunedeck.planner.setups that fits is ranked: first those with a margin
(on the GPUs, then with CPU offload, the slowest option), then tight ones (on the GPUs, then
offloaded), then QLoRA or more hardware. A plan is held within 10% of the peaks measured on
a GPU, so one closer to the card than its margin may run out of memory: it is "tight", and
never recommended over a set-up that fits. Within a group, the step cost model
(tunedeck.planner.step_cost) picks the fastest;
set-ups within TIE_SHARE of the fastest are a tie, which the selection guide breaks (LoRA
and QLoRA under ~13B: ZeRO-2; 13B and up in full: FSDP with activation checkpointing;
16-32 GB cards: ZeRO-2, offloaded when nothing else fits; several nodes: FSDP). A DPO
reference precomputed costs a forward pass over the pairs before step 1, as much compute as
auto's reference forwards: among tied set-ups, one that keeps reference auto comes first, so
precomputed is recommended where the frozen copy does not fit (or it is faster by more than
a tie).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import (STRATEGIES, StrategyPlan, model_states, napkin_ddp_bytes,
                                          plan_strategies, reference_kind)
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.planner.activation_memory import rows_per_micro_batch
from tunedeck.planner.reasons import advice_reasons, cost_words, objective_reasons, setup_reason
from tunedeck.planner.setups import ON_GPUS, OTHER_JOB, Setup, all_setups
from tunedeck.units import GB, format_count

FITS, TIGHT, DOES_NOT_FIT, NOT_SUPPORTED = "fits", "tight", "does not fit", "not supported"
# CUDA context, NCCL and allocator slack no tensor accounts for.
RUNTIME_RESERVE_BYTES = 1.5 * GB
# Below this share of what is left, a plan "fits"; up to all of it, it is "tight". Plans
# are within 10% of measured peaks (tests/tunedeck/planner/test_measured_plans.py), so a
# 15% margin leaves room for the plan's own error.
COMFORTABLE_SHARE = 0.85
LARGE_MODEL_PARAMETERS = 13e9
SMALL_CARD_GB = 32
TIE_SHARE = 1.10
MAX_ALTERNATIVES = 3


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    parameters: int
    trainable_parameters: int
    gpus: GpuSet
    strategies: dict[str, StrategyPlan]
    verdicts: dict[str, str]
    recommended: dict | None  # a set-up's JSON (tunedeck.planner.setups.Setup.as_json)
    reasons: list[str]
    alternatives: list[dict] = field(default_factory=list)
    parameter_count: dict = field(default_factory=dict)
    # Objective dpo: {"rows_per_micro_batch", "loss", "reference"}; None for sft, whose
    # JSON is as it was before dpo (its readers see no new key).
    dpo: dict | None = None

    def to_json(self) -> dict:
        answer = {
            "model": self.model,
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "parameter_count": self.parameter_count,
            "gpus": gpus_json(self.gpus),
            "strategies": list(STRATEGIES),
            **{name: {"per_gpu_gb": plan.breakdown.as_gb(), "fits": self.verdicts[name],
                      "host_gb_per_node": round(plan.host_bytes_per_node / GB, 3),
                      "notes": list(plan.notes)}
               for name, plan in self.strategies.items()},
            "recommended": self.recommended,
            "alternatives": self.alternatives,
            "reasons": self.reasons,
        }
        if self.dpo is not None:
            # Added keys only: `dpo`, and each strategy's `reference_gb`, the part of its
            # per_gpu_gb params that is the frozen reference copy.
            answer["dpo"] = self.dpo
            for name, plan in self.strategies.items():
                answer[name]["reference_gb"] = float(f"{plan.reference_bytes / GB:.4g}")
        return answer


def gpus_json(gpus: GpuSet) -> dict:
    """What the plan was made for; CPU ranks say so and name no card (a GPU plan's JSON is
    as it was before CPU plans, so its readers see no new key)."""
    if gpus.on_cpu:
        return {"count": gpus.count, "memory_gb": gpus.memory_gb, "nodes": gpus.nodes,
                "card": None, "device": "cpu"}
    return {"count": gpus.count, "memory_gb": gpus.memory_gb, "nodes": gpus.nodes,
            "card": gpus.card_spec.name}


def plan_memory(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> MemoryPlan:
    strategies = plan_strategies(spec, gpus, shape)
    verdicts = {name: verdict(plan, gpus) for name, plan in strategies.items()}
    order, why = preference(spec, gpus, shape)
    ranked = ranked_setups(spec, gpus, shape)
    best = ranked[0] if ranked else None
    reference = best.cost.seconds if best else 0.0
    recommended = setup_json(best, reference, spec, gpus) if best else None
    alternatives = [setup_json(setup, reference, spec, gpus) for setup in pick_alternatives(ranked)]
    states = model_states(spec, shape)
    ddp_states = strategies["ddp"].breakdown
    # The model's own states: a DPO reference copy is not the napkin sum's business.
    ddp_reference = strategies["ddp"].reference_bytes
    reasons = advice_reasons(
        best, gpus, order=order, why=why, recommended_reason=recommended and recommended["reason"],
        ddp_bytes=ddp_states.params - ddp_reference + ddp_states.grads + ddp_states.optimizer,
        napkin_bytes=napkin_ddp_bytes(spec, shape), precision=spec.precision,
        full_in_16_bit=spec.method == "full" and spec.precision != "fp32",
        objective_lines=objective_reasons(spec, shape, strategies, gpus))
    dpo = ({"rows_per_micro_batch": rows_per_micro_batch(spec), "loss": spec.dpo.loss,
            "reference": reference_kind(spec)} if spec.objective == "dpo" else None)
    return MemoryPlan(model=shape.name, parameters=states.parameters,
                      trainable_parameters=states.trainable, gpus=gpus, strategies=strategies,
                      verdicts=verdicts, recommended=recommended, reasons=reasons,
                      alternatives=alternatives, parameter_count=parameter_count(shape),
                      dpo=dpo)


def ranked_setups(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> list[Setup]:
    """Every set-up within reach that fits, best first."""
    return rank_setups(all_setups(spec, gpus, shape, verdict), preference(spec, gpus, shape)[0])


def setup_json(setup: Setup, reference_seconds: float, spec: JobSpec, gpus: GpuSet) -> dict:
    return setup.as_json(reference_seconds, cost_words(setup, reference_seconds, spec),
                         setup_reason(setup, gpus))


def parameter_count(shape: ModelShape) -> dict:
    return {"source": shape.counted_from, "by_dtype": dict(shape.parameters_by_dtype),
            "active_per_token": shape.active_parameters, "model_type": shape.model_type}


def verdict(plan: StrategyPlan, gpus: GpuSet) -> str:
    if not plan.supported:
        return NOT_SUPPORTED
    usable = gpus.memory_gb * GB - RUNTIME_RESERVE_BYTES
    if plan.breakdown.total <= COMFORTABLE_SHARE * usable:
        return FITS
    return TIGHT if plan.breakdown.total <= usable else DOES_NOT_FIT


def _group(setup: Setup) -> int:
    """Set-ups with a margin first (on the GPUs, then offloaded), then tight ones (the
    plan is within its own error of the card: a job planned tight can run out of memory),
    then a changed job or more GPUs."""
    if setup.tier == OTHER_JOB:
        return 4 + (0 if setup.verdict == FITS else 1)
    return setup.tier + (0 if setup.verdict == FITS else 2)


def rank_setups(setups: list[Setup], order: list[str]) -> list[Setup]:
    """Best first: the best group, the fastest within it, ties broken by keeping a DPO
    reference auto (a precomputed one costs a pass over the pairs before step 1), then by
    the guide's order, then by fewer changes."""
    def guide_index(setup: Setup) -> int:
        return order.index(setup.strategy) if setup.strategy in order else len(order)

    by_group = sorted(setups, key=lambda s: (_group(s), s.cost.seconds, len(s.changes)))
    if not by_group:
        return []
    group = _group(by_group[0])
    fastest = by_group[0].cost.seconds
    tied = [s for s in by_group if _group(s) == group and s.cost.seconds <= TIE_SHARE * fastest]
    best = min(tied, key=lambda s: (s.precomputes_reference, guide_index(s), len(s.changes),
                                    s.cost.seconds))
    return [best, *(s for s in by_group if s is not best)]


def pick_alternatives(ranked: list[Setup]) -> list[Setup]:
    """Up to three others, each a different strategy (on the GPUs, offloaded), then, when the
    job does not fit comfortably as it is, the best that changes the job or the GPUs; when
    only such changes fit, one of each kind."""
    if not ranked:
        return []
    best, chosen = ranked[0], []
    if best.tier != OTHER_JOB:
        seen = {best.strategy}
        for setup in ranked[1:]:
            if setup.tier != OTHER_JOB and setup.strategy not in seen:
                chosen.append(setup)
                seen.add(setup.strategy)
        # A bigger change (QLoRA, more GPUs) is offered only when the job needs one: when it
        # fits comfortably on its GPUs, more of them make no step faster.
        needed = best.tier != ON_GPUS or best.verdict != FITS
        others = [setup for setup in _one_of_each_kind(ranked[1:], set())
                  if not setup.strategy.endswith("_offload")] if needed else []
        room = max(MAX_ALTERNATIVES - len(chosen), 1 if others else 0)
        return (chosen[:MAX_ALTERNATIVES - room] + others[:room])
    return _one_of_each_kind(ranked[1:], {best.changes[0]})[:MAX_ALTERNATIVES]


def _one_of_each_kind(ranked: list[Setup], kinds: set[str]) -> list[Setup]:
    """The best set-up of each job or hardware change (QLoRA, 8 GPUs per node, ...), on
    the GPUs alone where the change allows it; a change that still needs offload is worth
    naming only when nothing of its kind avoids it and the job needs it to fit at all."""
    chosen = []
    for setup in sorted(ranked, key=lambda s: s.strategy.endswith("_offload")):
        if setup.tier == OTHER_JOB and setup.changes[0] not in kinds:
            chosen.append(setup)
            kinds.add(setup.changes[0])
    return chosen


def preference(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> tuple[list[str], str]:
    """The guide's order of strategies for this job, and the sentence that explains it."""
    billions = shape.total_parameters / 1e9
    if spec.method == "qlora":  # FSDP cannot shard packed 4-bit weights
        return (["zero2", "zero2_offload"],
                "QLoRA runs under ZeRO-2: FSDP cannot shard the packed 4-bit weights")
    if gpus.nodes > 1:
        return (["fsdp", "fsdp_offload", "zero2", "zero2_offload"],
                f"{gpus.nodes} nodes: FSDP shards the weights too, so memory per {gpus.rank_word} falls as "
                "nodes are added; it is FSDP's home")
    if spec.method in ("full", "lora") and shape.total_parameters >= LARGE_MODEL_PARAMETERS:
        return (["fsdp", "fsdp_offload", "zero2", "zero2_offload"],
                f"{spec.method} on {billions:.0f}B parameters: every ZeRO-2 rank would hold "
                "all the weights, FSDP shards them")
    if gpus.memory_gb <= SMALL_CARD_GB and not gpus.on_cpu:
        return (["zero2", "zero2_offload", "fsdp", "fsdp_offload"],
                f"{gpus.memory_gb:g} GB cards: ZeRO-2, with the optimizer offloaded to host "
                "memory when nothing else fits")
    return (["zero2", "fsdp", "zero2_offload", "fsdp_offload"],
            f"{format_count(shape.total_parameters)} parameters with {spec.method}: ZeRO-2 is "
            "the sweet spot (no "
            "parameter all-gather in forward, low communication, stable)")
