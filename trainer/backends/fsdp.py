"""PyTorch FSDP2 (`fully_shard`): parameters, gradients and optimizer state are all sharded.

Each decoder layer is its own shard group (all-gathered just before use, freed after), then
the root takes what is left (embeddings, final norm, head). Master weights stay fp32 and
gradients are reduced in fp32; only the forward/backward compute runs in `param_dtype`.
"""
from __future__ import annotations

import math
from typing import Any

from trainer.method import trainable_parameters
from trainer.rank import RankContext


class FsdpBackend:
    def __init__(self, model, optimizer, *, grad_accum: int, max_grad_norm: float):
        self._model = model
        self._optimizer = optimizer
        self._grad_accum = grad_accum
        self._max_grad_norm = max_grad_norm
        self._micro_step = 0

    @classmethod
    def init_distributed(cls, context: RankContext) -> None:
        import torch
        import torch.distributed as dist

        if context.uses_cuda:
            torch.cuda.set_device(context.device)
        dist.init_process_group(backend=context.communication_backend)

    @classmethod
    def wrap(cls, model, settings: dict[str, Any], context: RankContext) -> "FsdpBackend":
        import torch

        shard_model(model, settings, context)
        optimizer_settings = settings["optimizer"]
        optimizer = torch.optim.AdamW(
            trainable_parameters(model), lr=optimizer_settings["lr"],
            betas=tuple(optimizer_settings["betas"]), eps=optimizer_settings["eps"],
            weight_decay=optimizer_settings["weight_decay"],
        )
        return cls(model, optimizer, grad_accum=settings["gradient_accumulation_steps"],
                   max_grad_norm=settings["gradient_clipping"])

    def set_learning_rate(self, learning_rate: float) -> None:
        for group in self._optimizer.param_groups:
            group["lr"] = learning_rate

    def step(self, batch: dict[str, Any]):
        self._micro_step += 1
        # Reduce-scatter gradients only after the last micro-batch of the step.
        self._model.set_requires_gradient_sync(self._micro_step % self._grad_accum == 0)
        loss = self._model(**batch).loss
        (loss / self._grad_accum).backward()
        return loss.detach().float()

    def optimizer_step(self):
        import torch
        from torch.distributed.tensor import DTensor

        # A max norm of 0 means no clipping; an infinite one still measures the norm.
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(self._model),
                                                   self._max_grad_norm or math.inf)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        # Over sharded gradients the norm is a DTensor; full_tensor() sums the shards' parts.
        return grad_norm.full_tensor() if isinstance(grad_norm, DTensor) else grad_norm

    def gather_trainable_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # Every rank joins the all-gather; with cpu_offload only rank 0 keeps the result.
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        return get_model_state_dict(self._model, options=options)


def shard_model(model, settings: dict[str, Any], context: RankContext) -> None:
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    precision = settings["mixed_precision"]
    mixed_precision = MixedPrecisionPolicy(
        param_dtype=getattr(torch, precision["param_dtype"]),
        reduce_dtype=getattr(torch, precision["reduce_dtype"]),
    )
    # Pinned host memory needs a GPU; on a CPU-only host offloaded shards stay plain.
    offload = (CPUOffloadPolicy(pin_memory=context.uses_cuda) if settings["cpu_offload"]
               else OffloadPolicy())
    shard_options = {"mp_policy": mixed_precision, "offload_policy": offload,
                     "reshard_after_forward": settings["reshard_after_forward"]}
    for layer in decoder_layers(model):
        fully_shard(layer, **shard_options)
    fully_shard(model, **shard_options)


def decoder_layers(model) -> list:
    """The transformer blocks, found by the class names the model itself marks as units
    that must not be split (`_no_split_modules`, e.g. LlamaDecoderLayer)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    block_names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [module for module in model.modules() if type(module).__name__ in block_names]
    if not layers:
        raise ValueError(f"fsdp: found no decoder layers in {type(base).__name__} "
                         f"(looked for {sorted(block_names) or 'its _no_split_modules'})")
    return layers
