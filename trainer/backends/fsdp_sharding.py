"""How FSDP2 `fully_shard` is applied to a model: shard groups, mixed precision, buffers,
prefetching and compilation, each from the run's generated fsdp.json.

Each decoder layer is its own shard group (all-gathered just before use, freed after), then
the root takes what is left (embeddings, final norm, head).
"""
from __future__ import annotations

from typing import Any

from trainer.rank import RankContext

# Rotary position frequencies: transformers recomputes the angles from them in fp32 with
# autocast off, so rounding them to bf16 would only shift every angle (by up to ~0.4% of
# position x frequency, whole radians at long positions) and save a few hundred bytes.
FP32_BUFFER_SUFFIXES = ("inv_freq",)


def shard_model(model, settings: dict[str, Any], context: RankContext) -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    layers = decoder_layers(model)
    precision = settings["mixed_precision"]
    cast_floating_buffers(model, precision["buffer_dtype"])
    if settings["compile"]:
        compile_layers(layers)
    # Pinned host memory needs a GPU; on a CPU-only host offloaded shards stay plain.
    offload = (CPUOffloadPolicy(pin_memory=context.uses_cuda) if settings["cpu_offload"]
               else OffloadPolicy())
    shard_options = {"mp_policy": mixed_precision_policy(precision), "offload_policy": offload,
                     "reshard_after_forward": settings["reshard_after_forward"]}
    for layer in layers:
        fully_shard(layer, **shard_options)
    fully_shard(model, **shard_options)
    set_prefetching(model, layers, forward=settings["forward_prefetch"],
                    backward=settings["backward_prefetch"])


def mixed_precision_policy(precision: dict[str, str]):
    """The sharded parameters stay what they were loaded as (fp32 masters: the optimizer
    steps on them); FSDP2 casts each all-gathered copy to `param_dtype` for compute and
    reduce-scatters gradients in `reduce_dtype`, then keeps them in fp32 beside the master."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=getattr(torch, precision["param_dtype"]),
                                reduce_dtype=getattr(torch, precision["reduce_dtype"]))


def cast_floating_buffers(model, dtype_name: str) -> None:
    """FSDP2 neither shards nor casts buffers (`MixedPrecisionPolicy` has no buffer dtype),
    so `buffer_dtype` is applied here, once, to every floating-point buffer but the rotary
    frequencies (see FP32_BUFFER_SUFFIXES). Integer buffers (ids, masks) are left alone."""
    import torch

    dtype = getattr(torch, dtype_name)
    for name, buffer in model.named_buffers():
        if buffer.is_floating_point() and not name.endswith(FP32_BUFFER_SUFFIXES):
            buffer.data = buffer.data.to(dtype)


def compile_layers(layers: list) -> None:
    """torch.compile each decoder layer in place before it is sharded (per block, as
    torchtitan does): FSDP2's all-gather and reduce-scatter hooks run between the compiled
    blocks, so the graphs never see a collective. Compilation itself happens on the first
    forward (inductor; on CPU it builds C++ kernels and needs a compiler on the host)."""
    for layer in layers:
        layer.compile()


def set_prefetching(model, layers: list, *, forward: bool, backward: bool) -> None:
    """FSDP2 by default prefetches, in backward, the all-gather of the layer that runs
    next (one layer ahead), and prefetches nothing explicitly in forward.

    `forward`: each layer issues the next layer's all-gather as soon as its own is done.
    `not backward`: the default backward prefetch runs only while a module's list of
    explicit backward prefetches is empty (`_pre_backward`: `default_prefetch =
    len(...) == 0`), so an empty list leaves it on; a module that names only itself turns
    it off, and its own all-gather is already done when the hook runs, so naming it
    gathers nothing."""
    if forward:
        for layer, next_layer in zip(layers, layers[1:]):
            layer.set_modules_to_forward_prefetch([next_layer])
    if not backward:
        for module in (*layers, model):
            module.set_modules_to_backward_prefetch([module])


def decoder_layers(model) -> list:
    """The transformer blocks, in forward order: the modules of the classes the model marks
    as units that must not be split (`_no_split_modules`, e.g. MixtralDecoderLayer), the
    outermost only (FSDP2 shards a child group before its parent, never one inside an
    already sharded block). A model that names none, or none that it holds, falls back to its
    list of identical blocks (`model.layers`, `gpt_neox.layers`, `transformer.h`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    block_names = set(getattr(base, "_no_split_modules", None) or ())
    named = [(name, module) for name, module in model.named_modules()
             if type(module).__name__ in block_names]
    layers = [module for name, module in named
              if not any(name.startswith(f"{outer}.") for outer, _ in named)]
    if not layers:
        layers = block_list(base)
    if not layers:
        raise ValueError(f"fsdp: found no decoder layers in {type(base).__name__} (no "
                         f"{sorted(block_names) or '_no_split_modules'} class, and no list of "
                         "identical blocks) to shard one by one; use backend zero2")
    return layers


def block_list(model) -> list:
    """The biggest nn.ModuleList whose entries are all of one class: a decoder's layers."""
    import torch

    candidates = [list(module) for module in model.modules()
                  if isinstance(module, torch.nn.ModuleList) and len(module) > 0
                  and len({type(entry) for entry in module}) == 1]
    if not candidates:
        return []
    return max(candidates, key=lambda blocks: sum(parameter.numel() for block in blocks
                                                  for parameter in block.parameters()))
