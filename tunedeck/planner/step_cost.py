"""What one optimizer step costs under a strategy: a simple model of step time, to rank the
set-ups that fit (not to promise seconds: only a GPU run says those).

Per micro-batch of t = micro_batch_size x seq_len tokens on each rank:
- compute: FLOPs per token are 2M forward for M matmul weights a token passes (the top-k
  experts only), 4M backward when every weight trains and 2M when the base is frozen
  (LoRA, QLoRA), plus attention's 2 x seq_len x width per layer forward (causal) and twice
  that backward; activation checkpointing runs the forward again. At REFERENCE_MFU of the
  card's bf16 peak for a micro-batch of SATURATING_TOKENS or more; a smaller one keeps the
  GPU less busy, at t / (t + HALF_SPEED_TOKENS) of the speed relative to that (1024 tokens:
  0.62 of it), so a smaller micro-batch is not free. QLoRA's 4-bit matmuls dequantize first
  (QLORA_SLOWDOWN).
- communication, overlapped with compute (a micro-batch takes the longer of the two), at
  the card's link bandwidth inside a node and INTER_NODE_BYTES_PER_S across nodes, a ring's
  (N-1)/N of the bytes: ZeRO-2 reduce-scatters the c-byte gradients every micro-batch and
  all-gathers the updated weights once a step (not overlapped); FSDP all-gathers the c-byte
  weights for forward and again for backward (once with shard_grad_op) and reduce-scatters
  the gradients in reduce_dtype, every micro-batch.
- offload, not overlapped: over PCIe, ZeRO-2 moves the gradient partition to the host every
  micro-batch and the updated weights back once a step, and DeepSpeed's CPU Adam updates
  the partition; FSDP's CPU offload copies the fp32 weight shards up for forward and for
  backward and the gradients down every micro-batch, and torch's Adam runs on the CPU.

Objective dpo: a micro-batch is one forward of two rows a pair (t doubles). A loss with a
reference model adds its forward (2M a token, no backward) of those rows, and the weights a
backend that shards them gathers for it (`Backend.forward_gather_bytes`): with reference
auto every micro-batch (the adapter off, or the frozen copy); with reference precomputed
once, before step 1, one forward per pair. The cost model knows no dataset size, so it
charges that pass to each step as the same forward auto runs (as over one epoch): the two
cost the same, and the advice keeps auto wherever it fits as fast (precomputed wins where
the frozen copy does not fit, or fits only through a slower change).
"""
from __future__ import annotations

from dataclasses import dataclass

from tunedeck.backends import backend_of_strategy
from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.activation_memory import micro_batch_tokens
from tunedeck.planner.gpu_cards import INTER_NODE_BYTES_PER_S, PCIE_BYTES_PER_S, GpuSet
from tunedeck.planner.memory_plan import model_states
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import compute_bytes

REFERENCE_MFU = 0.4
SATURATING_TOKENS = 4096
HALF_SPEED_TOKENS = 1024
QLORA_SLOWDOWN = 1.3


@dataclass(frozen=True)
class StepCost:
    compute_s: float  # the whole step's compute, recomputation included
    recompute_s: float  # of compute_s, activation checkpointing's second forward
    communication_s: float  # the collectives, overlapped or not
    exposed_communication_s: float  # what compute does not hide
    offload_s: float  # PCIe copies and the CPU optimizer step
    # Of compute_s, a DPO reference model's forward (reference precomputed: its one pass
    # before step 1, charged per step as the same forward).
    reference_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.compute_s + self.exposed_communication_s + self.offload_s


def flops_per_token(spec: JobSpec, shape: ModelShape, *, checkpointing: bool) -> tuple[float, float]:
    """(FLOPs a token costs in one step, of which recomputation)."""
    matmul = shape.active_matmul_parameters
    attention_forward = 2 * spec.seq_len * shape.q_width * shape.num_layers
    forward = 2 * matmul + attention_forward
    backward = (4 if spec.method == "full" else 2) * matmul + 2 * attention_forward
    recompute = forward if checkpointing else 0.0
    return forward + backward + recompute, recompute


def reference_flops_per_token(spec: JobSpec, shape: ModelShape) -> float:
    """A DPO reference model's forward, per token of the policy's rows: none for sft or a
    reference-free loss (simpo, orpo)."""
    if not spec.uses_reference_model:
        return 0.0
    attention_forward = 2 * spec.seq_len * shape.q_width * shape.num_layers
    return 2 * shape.active_matmul_parameters + attention_forward


def utilisation(micro_tokens: int) -> float:
    """The share of REFERENCE_MFU a micro-batch of this many tokens reaches."""
    saturated = SATURATING_TOKENS / (SATURATING_TOKENS + HALF_SPEED_TOKENS)
    return min(1.0, micro_tokens / (micro_tokens + HALF_SPEED_TOKENS) / saturated)


def step_cost(spec: JobSpec, gpus: GpuSet, shape: ModelShape, strategy: str) -> StepCost:
    card = gpus.card_spec
    ranks = gpus.world_size
    micro_tokens = micro_batch_tokens(spec)
    flops, recompute = flops_per_token(spec, shape, checkpointing=spec.activation_checkpointing)
    reference = reference_flops_per_token(spec, shape)
    speed = (card.bf16_flops * REFERENCE_MFU * utilisation(micro_tokens)
             / (QLORA_SLOWDOWN if spec.method == "qlora" else 1))
    micro_compute = micro_tokens * (flops + reference) / speed
    micro_comm, step_comm = _communication_bytes(spec, shape, strategy, ranks)
    bandwidth = card.link_bytes_per_s if gpus.nodes == 1 else min(card.link_bytes_per_s,
                                                                 INTER_NODE_BYTES_PER_S)
    ring = (ranks - 1) / ranks
    micro_comm_s = ring * micro_comm / bandwidth
    step_comm_s = ring * step_comm / bandwidth
    exposed = spec.grad_accum * max(0.0, micro_comm_s - micro_compute) + step_comm_s
    return StepCost(compute_s=spec.grad_accum * micro_compute,
                    recompute_s=spec.grad_accum * micro_tokens * recompute / speed,
                    communication_s=spec.grad_accum * micro_comm_s + step_comm_s,
                    exposed_communication_s=exposed,
                    offload_s=_offload_seconds(spec, shape, strategy, ranks),
                    reference_s=spec.grad_accum * micro_tokens * reference / speed)


def _communication_bytes(spec: JobSpec, shape: ModelShape, strategy: str,
                         ranks: int) -> tuple[float, float]:
    """(bytes each rank moves per micro-batch, once per step) in collectives."""
    if ranks == 1:
        return 0.0, 0.0
    states = model_states(spec, shape)
    backend = backend_of_strategy(strategy)
    if backend is not None:
        micro, step = backend.communication_bytes(spec, states.parameters, states.trainable)
        if spec.uses_reference_model:
            # The reference's forward (the frozen copy, as many weights as the model, or the
            # model itself with the adapter off; precomputed: its pass before step 1).
            micro += backend.forward_gather_bytes(spec, states.parameters)
        return micro, step
    # DDP: an all-reduce of the gradients, twice a reduce-scatter's bytes.
    return 2 * compute_bytes(spec.precision) * states.trainable, 0.0


def _offload_seconds(spec: JobSpec, shape: ModelShape, strategy: str, ranks: int) -> float:
    if not strategy.endswith("_offload"):
        return 0.0
    states = model_states(spec, shape)
    shard = states.trainable / ranks
    copies, cpu_adam_parameters_per_s = backend_of_strategy(strategy).offload_traffic(
        spec, states.parameters / ranks, shard)
    return copies / PCIE_BYTES_PER_S + shard / cpu_adam_parameters_per_s
