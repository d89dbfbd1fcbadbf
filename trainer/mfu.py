"""Model FLOPs utilisation: the share of the GPUs' peak dense bf16 FLOPs the step reached.

A token costs 2N FLOPs forward and 4N backward with every weight trained (6N), but only
2N backward when the base weights are frozen (LoRA, QLoRA: gradients flow through the
activations, none are computed for the frozen weights), so 4N. N counts the matmul weights
(every Linear, trainable or frozen), the FLOPs that matter. On a CPU, or a card missing
from the table, there is no MFU: the meter adds nothing to the step event.
"""
from __future__ import annotations

from typing import Any

import torch

# The card table is the planner's (tunedeck.planner.gpu_cards), so plans and MFU agree.
from tunedeck.planner.gpu_cards import peak_flops_for


def matmul_parameter_count(model: torch.nn.Module) -> int:
    # in x out, not weight.numel(): a 4-bit Linear packs two weights a byte.
    return sum(module.in_features * module.out_features for module in model.modules()
               if isinstance(module, torch.nn.Linear))


class MfuMeter:
    """`fields(tokens_per_second)`: {"mfu": ...} on a known GPU, {} elsewhere."""

    def __init__(self, flops_per_token: float | None, peak_flops_all_ranks: float | None):
        self._flops_per_token = flops_per_token
        self._peak = peak_flops_all_ranks

    @classmethod
    def for_model(cls, model: torch.nn.Module, *, full_finetune: bool, device: Any,
                  world_size: int) -> "MfuMeter":
        if getattr(device, "type", str(device)) != "cuda" or not torch.cuda.is_available():
            return cls(None, None)
        peak = peak_flops_for(torch.cuda.get_device_name(device))
        flops_per_token = (6 if full_finetune else 4) * matmul_parameter_count(model)
        return cls(flops_per_token, peak * world_size if peak else None)

    def fields(self, tokens_per_second: float) -> dict[str, float]:
        """The step's tokens are every rank's, so they are measured against every GPU's peak."""
        if not self._peak or not self._flops_per_token:
            return {}
        return {"mfu": tokens_per_second * self._flops_per_token / self._peak}
