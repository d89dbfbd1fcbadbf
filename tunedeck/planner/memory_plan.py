"""The memory planner: bytes per GPU of a spec under each way of training it, before launch.

A pure function of the spec, the GPU set and the model's shape (no I/O, no torch), so the
form, `POST /api/plan` and `tunedeck plan` give the same answer, and golden tests pin it.

One counting convention for every backend, the ZeRO paper's for mixed-precision Adam
(c = bytes of the compute dtype: 2 for bf16/fp16, 4 for fp32; P = all parameters,
T = trainable ones, N = ranks): c-byte weights, c-byte gradients, and K = 12 bytes of
optimizer state per trainable parameter (the fp32 master copy 4, Adam's fp32 momentum and
variance 8). For a full fine-tune in bf16 that is 16 bytes a parameter, 2 + 2 + 12:
- ddp, the reference: every rank holds all of it, 16P (13B: 26 + 26 + 156 = 208 GB). The
  usual napkin sum (26 + 26 + 104 = 156 GB) leaves the fp32 master copy out; the advice says
  so, with the difference. In fp32 the weights are their own master copy (K = 8).
- zero2: the paper's 2P + 14P/N. Weights whole on every rank (DeepSpeed casts the module to
  the compute dtype), gradients partitioned (cT/N), optimizer partitioned (12T/N; DeepSpeed
  keeps its own fp32 partition even in fp32). DeepSpeed's estimator says 2P + 18P/N: it adds
  a 4T/N fp32 gradient partition that exists only inside the optimizer step, when the
  activations are already freed, so this plan leaves it out of the peak.
- fsdp: what TuneDeck's FSDP2 trainer holds: fp32 master weights sharded (4P/N; they are
  the parameters), fp32 gradients sharded (4T/N), Adam state sharded (8T/N): the paper's
  16P/N for full sharding, plus the layers gathered in the compute dtype while they run.
- offload variants keep the optimizer (zero2_offload) or everything sharded (fsdp_offload)
  in host memory; `host_gb` says how much each node needs.
"""
from __future__ import annotations

from dataclasses import dataclass

from tunedeck.job_spec import JobSpec
from tunedeck.planner.activation_memory import (activation_bytes, attention_mask_bytes,
                                                logits_bytes)
from tunedeck.planner.gpu_cards import GpuSet
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import FP32_BYTES, GB, compute_bytes

STRATEGIES = ("ddp", "zero2", "zero2_offload", "fsdp", "fsdp_offload")
ADAM_STATE_BYTES = 8  # fp32 momentum + variance per trainable parameter
# bitsandbytes NF4: half a byte per weight, plus one 8-bit absmax per 64-weight block and,
# with double quantization, one fp32 scale per 256 of those blocks.
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)
# DeepSpeed documents that overlap_comm costs 4.5x the bucket sizes in buffers.
OVERLAP_COMM_BUFFER_FACTOR = 4.5


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
    adapter = shape.lora_parameters(spec.lora)
    parameters = shape.total_parameters + adapter
    trainable = shape.lora_trainable(spec.lora)
    if spec.method == "lora":
        return ModelStates(parameters, trainable, compute * parameters)
    quantized = shape.quantizable_parameters  # the layers' nn.Linear weights
    unquantized = parameters - quantized
    return ModelStates(parameters, trainable,
                       NF4_BYTES_PER_WEIGHT * quantized + compute * unquantized)


def spec_strategy(spec: JobSpec) -> str:
    """The planner's name for the way a spec trains (zero2, fsdp_offload, ...)."""
    offloaded = spec.zero2.offload_optimizer if spec.backend == "zero2" else spec.fsdp.cpu_offload
    return f"{spec.backend}_offload" if offloaded else spec.backend


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


def plan_strategies(spec: JobSpec, gpus: GpuSet, shape: ModelShape) -> dict[str, StrategyPlan]:
    """Each strategy's bytes per GPU for this spec; the advice is tunedeck.planner.advice's."""
    # Imported here: activation_memory reads this module's byte sizes at import time.

    states = model_states(spec, shape)
    ranks, compute = gpus.world_size, compute_bytes(spec.precision)
    trainable = states.trainable
    activations = (activation_bytes(spec, shape, checkpointing=spec.activation_checkpointing)
                   + logits_bytes(spec, shape)
                   + attention_mask_bytes(spec, shape, checkpointing=spec.activation_checkpointing))
    zero2_buffers = _zero2_bucket_bytes(spec, trainable)
    fsdp_gathered = _fsdp_gathered_bytes(spec, shape)
    ranks_per_node = gpus.count
    plans = {
        "ddp": StrategyPlan("ddp", Breakdown(
            states.weight_bytes_compute, compute * trainable,
            optimizer_bytes_per_parameter(spec.precision) * trainable, activations, 0.0)),
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
        layer += shape.lora_parameters(spec.lora) // shape.num_layers
    root = shape.embedding_parameters + shape.head_parameters + shape.hidden_size
    prefetched = 1 if (spec.fsdp.backward_prefetch or spec.fsdp.forward_prefetch) else 0
    layers_gathered = (shape.num_layers if spec.fsdp.sharding_strategy == "shard_grad_op"
                       else 1 + prefetched)
    gradient_in_flight = (compute + reduce) * layer if spec.method == "full" else 0
    return compute * (root + layers_gathered * layer) + gradient_in_flight


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
