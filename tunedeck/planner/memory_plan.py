"""The memory planner: bytes per GPU of a spec under each way of training it, before launch.

A pure function of the spec, the GPU set and the model's shape (no I/O, no torch), so the
form, `POST /api/plan` and `tunedeck plan` give the same answer, and golden tests pin it.

Counting conventions (c = bytes of the compute dtype: 2 for bf16/fp16, 4 for fp32;
P = all parameters, T = trainable ones, N = ranks):
- ddp, the reference: the usual napkin sum. Every rank holds c-byte weights, c-byte
  gradients and Adam's fp32 momentum and variance (8T), and no fp32 master copy: for 13B
  in bf16, 26 + 26 + 104 = 156 GB. (A real AMP DDP also keeps fp32 masters: 4T more.)
- zero2: the ZeRO paper's 2P + 14P/N. Weights whole on every rank (DeepSpeed casts the
  module to the compute dtype), gradients partitioned (cT/N), optimizer partitioned: fp32
  master, momentum and variance (12T/N). DeepSpeed's own estimator counts 2P + 18P/N: it
  adds a 4T/N fp32 gradient partition that exists only inside the optimizer step, when the
  activations are already freed, so this plan leaves it out of the peak.
- fsdp: what TuneDeck's FSDP2 trainer holds: fp32 master weights sharded (4P/N; they are
  the parameters), fp32 gradients sharded (4T/N), Adam state sharded (8T/N), plus the
  layers gathered in the compute dtype while they run ("other").
- offload variants keep the optimizer (zero2_offload) or everything sharded (fsdp_offload)
  in host memory; `host_gb` says how much each node needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tunedeck.job_spec import JobSpec
from tunedeck.planner.model_shapes import ModelShape

GB = 10**9
STRATEGIES = ("ddp", "zero2", "zero2_offload", "fsdp", "fsdp_offload")
ADAM_STATE_BYTES = 8  # fp32 momentum + variance per trainable parameter
FP32_BYTES = 4
# bitsandbytes NF4: half a byte per weight, plus one 8-bit absmax per 64-weight block and,
# with double quantization, one fp32 scale per 256 of those blocks.
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)
# DeepSpeed documents that overlap_comm costs 4.5x the bucket sizes in buffers.
OVERLAP_COMM_BUFFER_FACTOR = 4.5


@dataclass(frozen=True)
class GpuSet:
    count: int = 1  # GPUs per node
    memory_gb: float = 80.0
    nodes: int = 1

    @property
    def world_size(self) -> int:
        return self.count * self.nodes


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
        return {name: round(value / GB, 3) for name, value in parts.items()}


@dataclass(frozen=True)
class StrategyPlan:
    name: str
    breakdown: Breakdown
    host_bytes_per_node: float = 0.0
    supported: bool = True
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelStates:
    """What the method makes of the model: parameter counts and the bytes of its weights."""

    parameters: int
    trainable: int
    weight_bytes_compute: float  # all weights in the compute dtype (4-bit base for QLoRA)


def model_states(spec: JobSpec, shape: ModelShape) -> ModelStates:
    compute = compute_bytes(spec.precision)
    if spec.method == "full":
        return ModelStates(shape.total_parameters, shape.total_parameters,
                           compute * shape.total_parameters)
    adapter = shape.lora_parameters(spec.lora.r, spec.lora.target_modules)
    parameters = shape.total_parameters + adapter
    if spec.method == "lora":
        return ModelStates(parameters, adapter, compute * parameters)
    quantized = shape.num_layers * shape.layer_linear_parameters  # the blocks' linears
    unquantized = parameters - quantized
    return ModelStates(parameters, adapter,
                       NF4_BYTES_PER_WEIGHT * quantized + compute * unquantized)


def compute_bytes(precision: str) -> int:
    return FP32_BYTES if precision == "fp32" else 2


def plan_strategies(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> dict[str, StrategyPlan]:
    """Each strategy's bytes per GPU for this spec; the advice is `memory_advice`'s job."""
    from tunedeck.planner.activation_memory import activation_bytes, logits_bytes

    states = model_states(spec, shape)
    ranks, compute = gpus.world_size, compute_bytes(spec.precision)
    trainable = states.trainable
    activations = (activation_bytes(spec, shape, checkpointing=spec.activation_checkpointing)
                   + logits_bytes(spec, shape))
    zero2_buffers = _zero2_bucket_bytes(spec, trainable)
    fsdp_gathered = _fsdp_gathered_bytes(spec, shape)
    ranks_per_node = gpus.count
    plans = {
        "ddp": StrategyPlan("ddp", Breakdown(
            states.weight_bytes_compute, compute * trainable, ADAM_STATE_BYTES * trainable,
            activations, 0.0)),
        "zero2": StrategyPlan("zero2", Breakdown(
            states.weight_bytes_compute, compute * trainable / ranks,
            (FP32_BYTES + ADAM_STATE_BYTES) * trainable / ranks, activations, zero2_buffers)),
        "zero2_offload": StrategyPlan("zero2_offload", Breakdown(
            states.weight_bytes_compute, 0.0, 0.0, activations, zero2_buffers),
            # fp32 master, momentum, variance and gradient partitions, for each local rank.
            host_bytes_per_node=(2 * FP32_BYTES + ADAM_STATE_BYTES) * trainable / ranks
            * ranks_per_node),
        "fsdp": StrategyPlan("fsdp", Breakdown(
            FP32_BYTES * states.parameters / ranks, FP32_BYTES * trainable / ranks,
            ADAM_STATE_BYTES * trainable / ranks, activations, fsdp_gathered)),
        "fsdp_offload": StrategyPlan("fsdp_offload", Breakdown(
            0.0, 0.0, 0.0, activations, fsdp_gathered),
            host_bytes_per_node=(FP32_BYTES * states.parameters + (FP32_BYTES + ADAM_STATE_BYTES)
                                 * trainable) / ranks * ranks_per_node),
    }
    if spec.method == "qlora":
        for name in ("fsdp", "fsdp_offload"):
            plans[name] = StrategyPlan(name, plans[name].breakdown, supported=False, notes=(
                "QLoRA runs under ZeRO-2 only: FSDP2 cannot shard the packed 4-bit weights",))
    return plans


def _zero2_bucket_bytes(spec: JobSpec, trainable: int) -> float:
    """DeepSpeed's reduce and all-gather buckets (a bucket never holds more than every
    trainable parameter), in the compute dtype."""
    elements = (min(spec.zero2.reduce_bucket_size, trainable)
                + min(spec.zero2.allgather_bucket_size, trainable))
    factor = OVERLAP_COMM_BUFFER_FACTOR if spec.zero2.overlap_comm else 1.0
    return factor * compute_bytes(spec.precision) * elements


def _fsdp_gathered_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """Unsharded copies FSDP2 makes while computing, in the compute dtype: the root's
    embedding and head (kept gathered through the step), and the running layer plus the one
    prefetched; with shard_grad_op every layer stays gathered from forward to backward.
    The running layer's unsharded gradient waits for its reduce-scatter, in reduce_dtype."""
    compute = compute_bytes(spec.fsdp.param_dtype or spec.precision)
    reduce = compute_bytes(spec.fsdp.reduce_dtype)
    layer = shape.layer_parameters
    if spec.method != "full":
        layer += shape.lora_parameters(spec.lora.r, spec.lora.target_modules) // shape.num_layers
    root = shape.embedding_parameters + shape.head_parameters + shape.hidden_size
    prefetched = 1 if (spec.fsdp.backward_prefetch or spec.fsdp.forward_prefetch) else 0
    layers_gathered = (shape.num_layers if spec.fsdp.sharding_strategy == "shard_grad_op"
                       else 1 + prefetched)
    gradient_in_flight = (compute + reduce) * layer if spec.method == "full" else 0
    return compute * (root + layers_gathered * layer) + gradient_in_flight


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    parameters: int
    trainable_parameters: int
    gpus: GpuSet
    strategies: dict[str, StrategyPlan]
    verdicts: dict[str, str]
    recommended: str | None
    reasons: list[str]
    suggestions: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "gpus": {"count": self.gpus.count, "memory_gb": self.gpus.memory_gb,
                     "nodes": self.gpus.nodes},
            **{name: {"per_gpu_gb": plan.breakdown.as_gb(), "fits": self.verdicts[name],
                      "host_gb_per_node": round(plan.host_bytes_per_node / GB, 3),
                      "notes": list(plan.notes)}
               for name, plan in self.strategies.items()},
            "recommended": self.recommended,
            "reasons": self.reasons,
            "suggestions": self.suggestions,
        }


def deepspeed_zero2_estimate(total_parameters: int, *, gpus_per_node: int, nodes: int,
                             cpu_offload: bool, additional_buffer_factor: float = 1.5
                             ) -> tuple[int, int]:
    """(host bytes, GPU bytes) by DeepSpeed's own ZeRO-2 convention (2P + 18P/N on the GPU;
    2P with offload), as `estimate_zero2_model_states_mem_needs` counts them."""
    total_gpus = gpus_per_node * nodes
    if cpu_offload:
        gpu = 2 * total_parameters
        host = total_parameters * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu = 2 * total_parameters + int(18 * total_parameters / total_gpus)
        host = total_parameters * 4 * gpus_per_node * additional_buffer_factor
    return int(host), int(gpu)
