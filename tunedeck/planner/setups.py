"""The set-ups a user could run a job with: a strategy plus changes to the spec, each with
its bytes per GPU and its step cost, for the advice to rank.

Changes come in three tiers, searched together and ranked tier by tier:
- on the GPUs, the same job: the backend, activation checkpointing, a smaller micro-batch
  with more gradient accumulation (the same examples per step), smaller DeepSpeed buckets,
  the fused AdamW (no temporary copy of the optimizer state in its step), and for a DPO full
  fine-tune with reference auto the reference precomputed (the same loss against the same
  reference log-probabilities, computed in one forward pass over the pairs before step 1,
  so no frozen copy of the weights is held);
- the same, with the optimizer (ZeRO-2) or everything (FSDP) offloaded to host memory;
- a different job or more hardware: QLoRA, more GPUs per node, more nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from tunedeck.backends import BACKENDS, backend_of_strategy
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.memory_plan import holds_reference_copy, plan_strategies
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.planner.step_cost import StepCost, step_cost
from tunedeck.units import GB

ON_GPUS, OFFLOADED, OTHER_JOB = 0, 1, 2
# The strategies TuneDeck runs: each backend on the GPUs, then each offloaded.
RUNNABLE = tuple(backend.strategy(offloaded) for offloaded in (False, True)
                 for backend in BACKENDS.values())
MAX_GPUS_PER_NODE = 8
MAX_NODES = 8
PRECOMPUTED_REFERENCE = {"dpo.reference": "precomputed"}
PRECOMPUTED_REFERENCE_WORDS = "reference precomputed"


@dataclass(frozen=True)
class Setup:
    strategy: str
    spec: JobSpec  # the spec with the changes made
    gpus: GpuSet
    spec_changes: dict  # dotted spec fields that differ from the job as written
    changes: tuple[str, ...]  # the same, in words
    tier: int
    total_bytes: float
    host_bytes: float  # per node, offloaded state
    verdict: str
    cost: StepCost

    @property
    def precomputes_reference(self) -> bool:
        """Its job runs a DPO reference pass over the pairs before step 1."""
        return self.spec.reference_mode == "precomputed"

    @property
    def label(self) -> str:
        return " + ".join((self.strategy, *self.changes))

    def as_json(self, reference_seconds: float, cost_words: str, reason: str) -> dict:
        return {"strategy": self.strategy, "backend": self.spec.backend, "label": self.label,
                "changes": list(self.changes), "spec_changes": self.spec_changes,
                "gpus": {"count": self.gpus.count, "nodes": self.gpus.nodes},
                "total_gb": float(f"{self.total_bytes / GB:.4g}"), "fits": self.verdict,
                **self._step_times(reference_seconds),
                "cost": cost_words, "reason": reason}

    def _step_times(self, reference_seconds: float) -> dict:
        """The cost model's seconds, where they stand for a GPU; None for CPU ranks, which it
        only puts in order."""
        if self.gpus.on_cpu:
            return {"step_seconds": None, "relative_step_time": None}
        return {"step_seconds": float(f"{self.cost.seconds:.4g}"),
                "relative_step_time": round(self.cost.seconds / reference_seconds, 3)
                if reference_seconds else 1.0}


def strategy_changes(spec: JobSpec, strategy: str) -> dict:
    """The dotted spec fields that run `spec` under `strategy`."""
    backend = backend_of_strategy(strategy)
    return {"backend": backend.name, backend.offload_field: strategy.endswith("_offload")}


def apply_spec_changes(spec: JobSpec, changes: dict) -> JobSpec:
    """`spec` with dotted fields set ({"fsdp.activation_checkpointing": True, ...}),
    validated again."""
    data = spec.model_dump(mode="json")
    for key, value in changes.items():
        section, _, name = key.rpartition(".")
        (data.setdefault(section, {}) if section else data)[name] = value
    return JobSpec.model_validate(data)


def _spec_value(spec: JobSpec, key: str):
    section, _, name = key.rpartition(".")
    return getattr(getattr(spec, section) if section else spec, name)


def all_setups(spec: JobSpec, gpus: GpuSet, shape: ModelShape, verdict) -> list[Setup]:
    """Every set-up of the three tiers that fits or is tight (`verdict(plan, gpus)` says)."""
    found = []
    for tier, job_changes, words, changed_gpus in _job_variants(spec, gpus):
        for strategy in RUNNABLE:
            if backend_of_strategy(strategy).method_problem(job_changes.get("method")):
                continue
            found.extend(_setups_of(spec, gpus, shape, verdict, strategy, tier, job_changes,
                                    words, changed_gpus))
    return _without_idle_changes(found)


def _without_idle_changes(setups: list[Setup]) -> list[Setup]:
    """One set-up for each outcome: a change that moves neither the bytes nor the step
    time (smaller buckets for an adapter whose bucket is its own size already, the fused
    AdamW where the memory backward freed already holds its step) is left out, and the
    same set-up without it stands."""
    kept: dict[tuple, Setup] = {}
    for setup in setups:
        outcome = (setup.strategy, setup.tier, setup.gpus, setup.spec.method,
                   round(setup.total_bytes), round(setup.cost.seconds, 9))
        if outcome not in kept or len(setup.changes) < len(kept[outcome].changes):
            kept[outcome] = setup
    return list(kept.values())


def _setups_of(spec: JobSpec, gpus: GpuSet, shape: ModelShape, verdict, strategy: str, tier: int,
               job_changes: dict, words: list[str], changed_gpus: GpuSet):
    for free_changes, free_words in _free_changes(spec, strategy):
        changes = {**job_changes, **strategy_changes(spec, strategy), **free_changes}
        try:
            changed = apply_spec_changes(spec, changes)
        except ValueError:
            continue  # a combination the spec refuses (e.g. several nodes and a pinned host)
        plan = plan_strategies(changed, changed_gpus, shape)[strategy]
        outcome = verdict(plan, changed_gpus)
        if outcome not in ("fits", "tight"):
            continue
        differing = {key: value for key, value in changes.items()
                     if _spec_value(spec, key) != value}
        # The set-up runs on the GPUs it was planned for: where they are not the spec's, the
        # spec must say so, or Apply and Retry would launch a plan made for other ranks.
        if changed_gpus.count != spec.num_gpus:
            differing["num_gpus"] = changed_gpus.count
        if changed_gpus.nodes != spec.num_nodes:
            differing["num_nodes"] = changed_gpus.nodes
        yield Setup(
            strategy=strategy, spec=changed, gpus=changed_gpus, spec_changes=differing,
            changes=tuple(words + free_words), tier=OFFLOADED if strategy.endswith("_offload")
            and tier == ON_GPUS else tier, total_bytes=plan.breakdown.total,
            host_bytes=plan.host_bytes_per_node,
            verdict=outcome, cost=step_cost(changed, changed_gpus, shape, strategy))


def _job_variants(spec: JobSpec, gpus: GpuSet):
    """(tier, spec changes, words, GPUs): the job as it is, then QLoRA and more hardware."""
    yield ON_GPUS, {}, [], gpus
    if spec.method != "qlora":
        yield OTHER_JOB, {"method": "qlora"}, ["qlora"], gpus
    if gpus.on_cpu:  # CPU ranks share their host's RAM: more of them, less RAM each
        return
    count = gpus.count
    while count < MAX_GPUS_PER_NODE:
        count = min(MAX_GPUS_PER_NODE, count * 2)
        yield OTHER_JOB, {"num_gpus": count}, [f"{count} GPUs per node"], \
            GpuSet(count, gpus.memory_gb, gpus.nodes, gpus.card)
    nodes = gpus.nodes
    while gpus.count == MAX_GPUS_PER_NODE and nodes < MAX_NODES:
        nodes = min(MAX_NODES, nodes * 2)
        # num_nodes in the changes, so the spec's own rules (e.g. a pinned host) are kept.
        yield OTHER_JOB, {"num_nodes": nodes}, [f"{nodes} nodes"], \
            GpuSet(gpus.count, gpus.memory_gb, nodes, gpus.card)


def _free_changes(spec: JobSpec, strategy: str):
    """(changes, words) that keep the job the same: checkpointing on or off, a smaller
    micro-batch, smaller DeepSpeed buckets (ZeRO-2's knob only), the fused AdamW where the
    step runs on the GPU (an offloaded optimizer steps on the host), a DPO reference
    precomputed instead of a frozen copy held (a full fine-tune with reference auto)."""
    backend = backend_of_strategy(strategy)
    micro = spec.micro_batch_size
    sizes = sorted((size for size in range(1, micro + 1) if micro % size == 0), reverse=True)
    smaller_buckets = backend.smaller_buckets(spec)
    buckets = [False, True] if smaller_buckets else [False]
    fused = [False, True] if not spec.fused_optimizer and not strategy.endswith("_offload") \
        else [False]
    precompute = [False, True] if holds_reference_copy(spec) else [False]
    for checkpointing, size, small_buckets, fuse, precomputed in product(
            (False, True), sizes, buckets, fused, precompute):
        changes, words = {f"{backend.name}.activation_checkpointing": checkpointing}, []
        if checkpointing != spec.activation_checkpointing:
            words.append("activation checkpointing" if checkpointing
                         else "no activation checkpointing")
        if size != micro:
            accumulation = spec.grad_accum * micro // size
            changes.update({"micro_batch_size": size, "grad_accum": accumulation})
            words.append(f"micro-batch {size} x grad_accum {accumulation}")
        if small_buckets:
            changes.update(smaller_buckets[0])
            words.append(smaller_buckets[1])
        if fuse:
            changes["fused_optimizer"] = True
            words.append("fused AdamW")
        if precomputed:
            changes.update(PRECOMPUTED_REFERENCE)
            words.append(PRECOMPUTED_REFERENCE_WORDS)
        yield changes, words
