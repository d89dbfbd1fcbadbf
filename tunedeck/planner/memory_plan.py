"""The memory planner: bytes per GPU of a spec under each way of training it, before launch.

A pure function of the spec, the GPU set and the model's shape (no I/O, no torch), so the
form, `POST /api/plan` and `tunedeck plan` give the same answer, and golden tests pin it
(tests/tunedeck/planner/test_measured_plans.py holds it to peaks measured on a GPU).

One counting convention for every backend, the ZeRO paper's for mixed-precision Adam
(c = bytes of the compute dtype: 2 for bf16/fp16, 4 for fp32; P = all parameters,
T = trainable ones, N = ranks): c-byte weights, c-byte gradients, and K = 12 bytes of
optimizer state per trainable parameter (the fp32 master copy 4, Adam's fp32 momentum and
variance 8). For a full fine-tune in bf16 that is 16 bytes a parameter, 2 + 2 + 12:
- ddp, the reference: every rank holds all of it, 16P (13B: 26 + 26 + 156 = 208 GB). The
  usual napkin sum (26 + 26 + 104 = 156 GB) leaves the fp32 master copy out; the advice says
  so, with the difference. In fp32 the weights are their own master copy (K = 8).
- each backend, on the GPUs and offloaded, counts what a rank holds itself
  (`Backend.state_bytes_per_rank`, tunedeck/backends/): zero2 the paper's 2P + 14P/N (weights
  whole, gradients and optimizer partitioned), fsdp its 16P/N (all three sharded); offload
  variants keep the optimizer (zero2_offload) or everything sharded (fsdp_offload) in host
  memory; `host_gb` says how much each node needs.

"other" is what the backend and the optimizer step add: DeepSpeed's gradient buckets or
FSDP's gathered layers, and the step's temporary copies. Torch's default (foreach) AdamW
makes one fp32 copy of the trainable shard (the square root of the variance) for the whole
step, and ZeRO-2 turns its gradient partition into fp32 before stepping; the fused AdamW
(`fused_optimizer`) makes none. The step runs after backward has freed the activations, and
the ranks run the CUDA allocator with expandable segments, which hands that memory on: the
step's copies count only where they need more than backward held (with checkpointing, or
for a model whose states dwarf its activations: 32 GB for an 8B full fine-tune on one GPU).
Without expandable segments the allocator kept the activations' blocks cached beside the
step's flat partitions, and the H200 measured the sum of both.

Objective dpo: two sequences per pair, so the activations are a forward of twice the rows
(activation_memory). A loss that compares with a reference model (not simpo or orpo) with
reference auto holds one for a full fine-tune: a frozen second copy of the weights in the
compute dtype, held as the backend holds the model's (`Backend.reference_bytes_per_rank`:
sharded under fsdp, whole on each rank under zero2), no gradients, no optimizer state; it is
counted with the weights ("params"), and `StrategyPlan.reference_bytes` says how much of them
it is. LoRA/QLoRA's reference is the same model with the adapter off, and reference
precomputed keeps only a few bytes a pair: neither holds reference weights.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tunedeck.backends import BACKENDS, backend_of
from tunedeck.backends.base import ADAM_STATE_BYTES, Backend, ModelStates
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.activation_memory import activation_bytes, rows_per_micro_batch, uses_liger
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import FP32_BYTES, GB, compute_bytes, format_size

DDP = "ddp"  # the reference every rank holds all of, which TuneDeck does not run
# The table's rows: the reference, then each backend on the GPUs and offloaded.
STRATEGIES = (DDP, *(strategy for backend in BACKENDS.values() for strategy in backend.strategies))
CPU_OFFLOAD_NOTE = "CPU ranks: the state is in RAM already, offloading it moves nothing"
# bitsandbytes NF4: half a byte per weight, plus one 8-bit absmax per 64-weight block and,
# with double quantization, one fp32 scale per 256 of those blocks.
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)


@dataclass(frozen=True)
class Breakdown:
    """Bytes one GPU holds at its peak, by what they are."""

    params: float
    grads: float
    optimizer: float
    activations: float
    other: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.other

    def as_gb(self) -> dict[str, float]:
        parts = {"params": self.params, "grads": self.grads, "optimizer": self.optimizer,
                 "activations": self.activations, "other": self.other, "total": self.total}
        # Four significant digits, so a tiny model's megabytes are not rounded to 0.
        return {name: float(f"{value / GB:.4g}") for name, value in parts.items()}


@dataclass(frozen=True)
class StrategyPlan:
    name: str
    breakdown: Breakdown
    host_bytes_per_node: float = 0.0
    supported: bool = True
    notes: tuple[str, ...] = ()
    # Of breakdown.params, a DPO reference model's frozen copy on the GPU (0 without one).
    reference_bytes: float = 0.0


def model_states(spec: JobSpec, shape: ModelShape) -> ModelStates:
    compute = compute_bytes(spec.precision)
    if spec.method == "full":
        return ModelStates(shape.total_parameters, shape.total_parameters,
                           compute * shape.total_parameters)
    adapter = shape.lora_parameters(spec.lora)
    parameters = shape.total_parameters + adapter
    trainable = shape.lora_trainable(spec.lora)
    if spec.method == "lora":
        return ModelStates(parameters, trainable, compute * parameters)
    quantized = shape.quantizable_parameters  # the layers' nn.Linear weights
    unquantized = parameters - quantized
    return ModelStates(parameters, trainable,
                       NF4_BYTES_PER_WEIGHT * quantized + compute * unquantized)


def holds_reference_copy(spec: JobSpec) -> bool:
    """Whether the job trains beside a frozen copy of the weights: objective dpo with a loss
    that compares with a reference (not simpo, orpo) and reference auto, or grpo with beta
    above 0, in a full fine-tune
    (LoRA's and QLoRA's reference is their own base with the adapter off)."""
    return spec.reference_mode == "auto" and spec.method == "full"


def reference_parameters(spec: JobSpec, shape: ModelShape) -> int:
    """The parameters of the frozen reference copy the job holds while it trains; 0 without."""
    return shape.total_parameters if holds_reference_copy(spec) else 0


def reference_kind(spec: JobSpec) -> str | None:
    """What a DPO or GRPO job's reference model is, in the plan's words; None for sft."""
    if spec.objective == "sft":
        return None
    if not spec.uses_reference_model:
        return "none"  # simpo, orpo; grpo without a KL term
    if spec.reference_mode == "precomputed":
        return "precomputed"
    return "frozen copy" if holds_reference_copy(spec) else "adapter off"


def spec_strategy(spec: JobSpec) -> str:
    """The planner's name for the way a spec trains (zero2, fsdp_offload, ...)."""
    backend = backend_of(spec)
    return backend.strategy(backend.offloaded(spec))


def optimizer_bytes_per_parameter(precision: str) -> int:
    """K: Adam's two fp32 moments, and the fp32 master copy unless the weights are fp32."""
    master = 0 if precision == "fp32" else FP32_BYTES
    return master + ADAM_STATE_BYTES


def napkin_ddp_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """The usual hand sum for DDP: c-byte weights and gradients and Adam's moments, with no
    fp32 master copy (13B in bf16: 26 + 26 + 104 = 156 GB)."""
    states = model_states(spec, shape)
    return (states.weight_bytes_compute + compute_bytes(spec.precision) * states.trainable
            + ADAM_STATE_BYTES * states.trainable)


def plan_strategies(spec: JobSpec, gpus: GpuSet, shape: ModelShape, *,
                    full_rows: bool = False) -> dict[str, StrategyPlan]:
    """Each strategy's bytes per GPU for this spec; the advice is tunedeck.planner.advice's.
    `full_rows`: every row of the data is exactly seq_len long (the GPU benches'), so its
    micro-batches carry no padding mask; a job's data is planned as padded. CPU ranks hold
    their state in RAM already, so offloading to host memory has nothing to move."""
    if gpus.on_cpu and spec.kernels == "auto":  # auto runs plain on a host without GPUs
        spec = spec.model_copy(update={"kernels": "none"})
    states = model_states(spec, shape)
    activations = activation_bytes(spec, shape, full_rows=full_rows)
    compute, trainable = compute_bytes(spec.precision), states.trainable
    reference = compute * reference_parameters(spec, shape)  # every DDP rank holds it whole
    plans = {DDP: StrategyPlan(DDP, Breakdown(
        states.weight_bytes_compute + reference, compute * trainable,
        optimizer_bytes_per_parameter(spec.precision) * trainable, activations, 0.0),
        reference_bytes=reference)}
    for backend in BACKENDS.values():
        for offloaded in (False, True):
            plan = _backend_plan(backend, offloaded, spec, gpus, shape, states, activations)
            plans[plan.name] = plan
    if spec.objective == "dpo":
        plans = _with_objective_noted(plans, spec)
    if spec.objective == "grpo":
        plans = _with_sampling(plans, spec, shape, activations)
    if spec.kernels == "auto" and uses_liger(spec, shape):
        plans = _with_plain_kernels_noted(plans, spec, gpus, shape, full_rows=full_rows)
    return plans


def _backend_plan(backend: Backend, offloaded: bool, spec: JobSpec, gpus: GpuSet,
                  shape: ModelShape, states: ModelStates, activations: float) -> StrategyPlan:
    """One backend's set-up: the model states a rank holds under it (the backend counts
    them), a DPO reference copy's frozen weights (the backend holds them as it holds the
    model's), the activations, and the backend's buffers with the optimizer step's copies."""
    name = backend.strategy(offloaded)
    held = backend.state_bytes_per_rank(spec, states, shape, gpus.world_size,
                                        offloaded=offloaded)
    copied = reference_parameters(spec, shape)
    reference, reference_host = (backend.reference_bytes_per_rank(
        spec, copied, gpus.world_size, offloaded=offloaded) if copied else (0.0, 0.0))
    other = (held.buffers if held.step is None
             else with_optimizer_step(held.buffers, activations, held.step))
    breakdown = Breakdown(held.params + reference, held.grads, held.optimizer, activations,
                          other)
    if offloaded and gpus.on_cpu:
        return StrategyPlan(name, breakdown, supported=False, notes=(CPU_OFFLOAD_NOTE,),
                            reference_bytes=reference)
    note = backend.unsupported_method_note(spec.method)  # QLoRA under FSDP
    if note:
        return StrategyPlan(name, breakdown, supported=False, notes=(note,),
                            reference_bytes=reference)
    # The rank's offloaded state, for each local rank.
    return StrategyPlan(name, breakdown,
                        host_bytes_per_node=(held.host + reference_host) * gpus.count,
                        reference_bytes=reference)


def _with_objective_noted(plans: dict[str, StrategyPlan],
                          spec: JobSpec) -> dict[str, StrategyPlan]:
    """Objective dpo, on each strategy that can run it: its forward's rows, and the
    reference copy counted with its weights."""
    rows = rows_per_micro_batch(spec)
    doubled = (f"objective dpo: two sequences per pair: activations doubled (a micro-batch of "
               f"{spec.micro_batch_size} pair{'s' if spec.micro_batch_size > 1 else ''} is one "
               f"forward of {rows} rows, chosen then rejected, with whole logits and their "
               "fp32 log-softmax)")
    noted = {}
    for name, plan in plans.items():
        notes = (doubled,)
        if plan.reference_bytes:
            notes += (f"the weights include the frozen reference copy (reference auto): "
                      f"{format_size(plan.reference_bytes / GB)} of them",)
        elif holds_reference_copy(spec) and plan.host_bytes_per_node:
            notes += ("the frozen reference copy (reference auto) is offloaded with the "
                      "weights: counted in host memory",)
        noted[name] = replace(plan, notes=(*plan.notes, *notes)) if plan.supported else plan
    return noted


def _with_sampling(plans: dict[str, StrategyPlan], spec: JobSpec, shape: ModelShape,
                   activations: float) -> dict[str, StrategyPlan]:
    """Objective grpo: a round's sampling (tunedeck/planner/sampling_memory.py) happens
    between training steps, so what it needs beyond the step's activations is counted
    among the other bytes, and said."""
    from tunedeck.planner.sampling_memory import sampling_bytes, sampling_note

    # A backend that shards the decoder layers gathers its root's parameters for the call.
    sharded = {backend.strategy(offloaded): backend.shards_decoder_layers
               for backend in BACKENDS.values() for offloaded in (False, True)}
    sampled = {}
    for name, plan in plans.items():
        sampling = sampling_bytes(spec, shape, sharded=sharded.get(name, False))
        extra = max(0.0, sampling - activations)
        breakdown = replace(plan.breakdown, other=plan.breakdown.other + extra)
        note = sampling_note(spec, shape, sampling=sampling, activations=activations)
        sampled[name] = replace(plan, breakdown=breakdown,
                                notes=(*plan.notes, note) if plan.supported else plan.notes)
    return sampled


def _with_plain_kernels_noted(plans: dict[str, StrategyPlan], spec: JobSpec, gpus: GpuSet,
                              shape: ModelShape, *, full_rows: bool) -> dict[str, StrategyPlan]:
    """`kernels: auto` is planned as a GPU worker runs it, with Liger's kernels; each
    strategy also says what the job needs where a worker lacks liger-kernel (it then runs
    plain, and says so in the job's events)."""
    plain = plan_strategies(spec.model_copy(update={"kernels": "none"}), gpus, shape,
                            full_rows=full_rows)
    return {name: replace(plan, notes=(*plan.notes, (
                f"planned with Liger's kernels (kernels auto on a GPU worker with "
                f"liger-kernel); a worker without liger-kernel runs it plain: "
                f"{format_size(plain[name].breakdown.total / GB)} per GPU")))
            for name, plan in plans.items()}


def spec_plan(spec: JobSpec, gpus: GpuSet, shape: ModelShape, *,
              full_rows: bool = False) -> StrategyPlan:
    """The plan of the strategy the spec itself names (zero2, fsdp_offload, ...)."""
    return plan_strategies(spec, gpus, shape, full_rows=full_rows)[spec_strategy(spec)]


def with_optimizer_step(buffers: float, activations: float, step: float) -> float:
    """The backend's buffers, and what the optimizer step's temporaries need beyond the
    memory backward freed: the step comes after backward, and the ranks' allocator (with
    expandable segments, trainer/rank.py) hands the freed activations' memory on to it."""
    return buffers + max(0.0, step - activations - buffers)

