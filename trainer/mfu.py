"""Model FLOPs utilisation: the share of the GPUs' peak dense bf16 FLOPs the step reached.

Each step event on a GPU carries two figures, the same tokens/s over the same peak, with
two counts of the FLOPs a token costs:

- `mfu`, the work this method does (what TuneDeck charts): a Linear weight costs 2 FLOPs
  forward and 2 backward for the gradient of its input, plus 2 for its own gradient only
  when it is trained. So 6N for a full fine-tune, and about 4N for LoRA/QLoRA (4 x the
  frozen base + 6 x the adapters): the frozen weights get no gradient. NeMo Automodel's
  LoRA figure, 6N x (2 + trainable/frozen) / 3 = 4N + 2N x trainable/frozen, is the same
  count but for a hair (N x trainable/frozen is about the trainable count).
- `mfu_6n`, the plain convention: 6N for every method, as torchtitan, KempnerForge and
  most papers count a full fine-tune. For LoRA it reads about 1.5x `mfu`, crediting
  weight gradients that are never computed; compare it only with figures counted alike.

N is the matmul weights: every Linear's in x out (trainable or frozen, lm_head included,
the embedding lookup not). Both figures add attention's own FLOPs, which no weight counts:
12 x layers x heads x head_dim x T per token for forward and backward (QK^T and AV, 2
FLOPs a multiply-add, backward twice forward), with T the token's row length. This is
torchtitan's `get_num_flop_per_token` and PaLM's (Chowdhery et al. 2022, appendix B):
the causal mask's skipped half is not subtracted and flash attention's recomputation in
backward is not added, so a figure compares with theirs. T is the mean row length of the
step's micro-batches on this rank, weighted by tokens (sum of T^2 over sum of T), padding
left out: a packed row counts its whole length, although its examples do not see each
other, and a padding-free micro-batch counts the rows it was laid out from, so the same
data reads the same with padding_free on or off. Model
FLOPs, not the hardware's: activation checkpointing's recomputed forward is not counted.

On a CPU, or a card missing from the table, there is no MFU: the meter adds nothing to
the step event.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

# The card table is the planner's (tunedeck.planner.gpu_cards), so plans and MFU agree.
from tunedeck.planner.gpu_cards import peak_flops_for


def matmul_parameter_count(model: torch.nn.Module, *, trainable_only: bool = False) -> int:
    # in x out, not weight.numel(): a 4-bit Linear packs two weights a byte.
    return sum(module.in_features * module.out_features for module in model.modules()
               if isinstance(module, torch.nn.Linear)
               and (not trainable_only or module.weight.requires_grad))


def attention_flops_per_token_per_context(config: Any) -> float:
    """12 x layers x heads x head_dim: a token's attention FLOPs (forward and backward) per
    token of its row. 0 when the config does not say its attention shape."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    head_dim = getattr(config, "head_dim", None) or (hidden // heads if hidden and heads else None)
    if not (layers and heads and head_dim):
        return 0.0
    return 12.0 * layers * heads * head_dim


def context_length(micro_batch_row_lengths: list[Sequence[int]]) -> float:
    """The tokens a token of these micro-batches attends over, on average: sum T^2 / sum T,
    T each row's tokens (an example, or a packed row; padding-free or padded alike)."""
    lengths = [float(length) for row_lengths in micro_batch_row_lengths for length in row_lengths]
    total = sum(lengths)
    return sum(length * length for length in lengths) / total if total else 0.0


@dataclass(frozen=True)
class FlopsPerToken:
    method_weights: float  # 4N + 2 x the trained part of N
    plain_weights: float  # 6N
    attention_per_context: float  # times the row length T

    @classmethod
    def of_model(cls, model: torch.nn.Module) -> "FlopsPerToken":
        matmul = matmul_parameter_count(model)
        trained = matmul_parameter_count(model, trainable_only=True)
        config = getattr(model, "config", None)
        attention = attention_flops_per_token_per_context(config) if config is not None else 0.0
        return cls(method_weights=4 * matmul + 2 * trained, plain_weights=6 * matmul,
                   attention_per_context=attention)


class MfuMeter:
    """`fields(tokens_per_second, context_tokens)`: {"mfu": ..., "mfu_6n": ...} on a known
    GPU, {} elsewhere."""

    def __init__(self, flops_per_token: FlopsPerToken | None, peak_flops_all_ranks: float | None):
        self._flops_per_token = flops_per_token
        self._peak = peak_flops_all_ranks

    @classmethod
    def for_model(cls, model: torch.nn.Module, *, device: Any, world_size: int) -> "MfuMeter":
        if getattr(device, "type", str(device)) != "cuda" or not torch.cuda.is_available():
            return cls(None, None)
        peak = peak_flops_for(torch.cuda.get_device_name(device))
        return cls(FlopsPerToken.of_model(model), peak * world_size if peak else None)

    @property
    def measuring(self) -> bool:
        return bool(self._peak and self._flops_per_token)

    def step_fields(self, tokens_per_second: float,
                    micro_batch_row_lengths: list[Sequence[int]]) -> dict[str, float]:
        """`fields` for a step of micro-batches with these rows (counted only on a GPU)."""
        if not self.measuring:
            return {}
        return self.fields(tokens_per_second,
                           context_tokens=context_length(micro_batch_row_lengths))

    def fields(self, tokens_per_second: float, *, context_tokens: float) -> dict[str, float]:
        """The step's tokens are every rank's, so they are measured against every GPU's peak."""
        if not self.measuring:
            return {}
        flops = self._flops_per_token
        attention = flops.attention_per_context * context_tokens
        return {"mfu": tokens_per_second * (flops.method_weights + attention) / self._peak,
                "mfu_6n": tokens_per_second * (flops.plain_weights + attention) / self._peak}
