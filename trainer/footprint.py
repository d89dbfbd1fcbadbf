"""Bytes of parameters, gradients and optimizer state a rank holds: the figures the memory
planner (tunedeck/planner/memory_plan.py) predicts, measured on the real tensors.

Sharded tensors count their local shard only. A bitsandbytes 4-bit weight counts its packed
bytes and its block scales (absmax, and with double quantization the second-level absmax);
the 16-entry NF4 lookup tables are constants shared in spirit and left out.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Footprint:
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int

    def as_dict(self) -> dict[str, int]:
        return {"params_bytes": self.params_bytes, "grads_bytes": self.grads_bytes,
                "optimizer_bytes": self.optimizer_bytes}


def tensor_bytes(tensor) -> int:
    local = getattr(tensor, "_local_tensor", tensor)  # a DTensor's shard on this rank
    return local.numel() * local.element_size()


def tensors_bytes(tensors: Iterable) -> int:
    return sum(tensor_bytes(tensor) for tensor in tensors if tensor is not None)


def parameter_bytes(parameters: Iterable) -> int:
    """Each parameter once, with a 4-bit weight's block scales."""
    total = 0
    for parameter in parameters:
        total += tensor_bytes(parameter)
        quant_state = getattr(parameter, "quant_state", None)
        if quant_state is not None:
            total += _quant_state_bytes(quant_state)
    return total


def _quant_state_bytes(quant_state) -> int:
    total = tensor_bytes(quant_state.absmax)
    nested = getattr(quant_state, "state2", None)
    if nested is not None:
        total += tensor_bytes(nested.absmax)
    return total


def optimizer_state_bytes(optimizer) -> int:
    """Every tensor a torch optimizer keeps per parameter (Adam's moments and step)."""
    return sum(tensors_bytes(value for value in state.values() if hasattr(value, "numel"))
               for state in optimizer.state.values())


def gradient_bytes(parameters: Iterable) -> int:
    return tensors_bytes(parameter.grad for parameter in parameters)


def zero2_gradient_bytes(zero_optimizer) -> int:
    """ZeRO-2's reduced gradient partition at the accumulation boundary: its contiguous
    buffer when contiguous_gradients is on, else the per-group partition tensors."""
    contiguous = getattr(zero_optimizer, "grads_in_partition", None)
    if contiguous is not None:
        return tensor_bytes(contiguous)
    groups = getattr(zero_optimizer, "averaged_gradients", {}) or {}
    return sum(tensors_bytes(group or ()) for group in groups.values())


def zero2_optimizer_bytes(zero_optimizer) -> int:
    """ZeRO-2's fp32 master partition plus the wrapped optimizer's state for it."""
    masters = tensors_bytes(getattr(zero_optimizer, "single_partition_of_fp32_groups", ()))
    return masters + optimizer_state_bytes(zero_optimizer.optimizer)
