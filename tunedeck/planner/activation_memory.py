"""Activation and logits memory of a decoder, per GPU, from the spec's micro-batch, sequence
length and the model's sizes.

Counted as the tensors autograd keeps for backward in Hugging Face's decoders with PyTorch's
memory-efficient attention (no s x s score matrix is kept), per token of a micro-batch:
- each norm upcasts to fp32: its fp32 input, its normalized output and the scaled output
  the next linear keeps (4 + c + c bytes per hidden unit), and so do q/k norms (Qwen3, OLMoE);
- attention keeps every projection's output (q, k and v, or MLA's latents), the attention
  output and the contiguous copy of it o_proj keeps;
- a dense SwiGLU MLP keeps the gate output, the SiLU output, the up output and their product;
- a mixture-of-experts block keeps the router's fp32 logits and probabilities, and for each
  of the top-k experts a token is routed to, the gathered input, the same four SwiGLU
  tensors at the expert's width and the weighted output; a shared expert is a dense MLP;
- LoRA with dropout keeps a dropped copy of each adapted linear's input, and its mask.
With activation checkpointing each layer keeps only its input, and one layer at a time is
recomputed during backward. The logits are made in the compute dtype, upcast to fp32 for
the loss, and the loss keeps an fp32 log-softmax (c + 8 bytes per vocabulary entry).
"""
from __future__ import annotations

from tunedeck.job_spec import JobSpec
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import FP32_BYTES, compute_bytes

DROPOUT_MASK_BYTES = 1


def _compute_bytes(spec: JobSpec) -> int:
    return compute_bytes(spec.precision)


def layer_activation_bytes(spec: JobSpec, shape: ModelShape, *, sparse: bool | None = None) -> float:
    """What one decoder layer keeps for backward, for one micro-batch (the sparse layer of
    a mixture-of-experts model unless `sparse` says which)."""
    if sparse is None:
        sparse = shape.moe_layers > 0
    c = _compute_bytes(spec)
    tokens = spec.micro_batch_size * spec.seq_len
    attention = shape.attention_shapes()
    out_width = attention.get("o_proj", (shape.q_width, shape.hidden_size))[0]
    norms = (shape.norms_per_layer * shape.hidden_size + shape.qk_norm_width) * (FP32_BYTES + 2 * c)
    per_token = norms + c * sum(n_out for name, (_in, n_out) in attention.items()
                                if name != "o_proj") + 2 * c * out_width
    per_token += _mlp_bytes(shape, c, sparse=sparse)
    if spec.method != "full" and spec.lora.dropout > 0:
        adapted = [n_in for n_in, _out, _layers in shape.adapted_linears(spec.lora, sparse=sparse)]
        per_token += (c + DROPOUT_MASK_BYTES) * sum(adapted)
    return tokens * per_token


def _mlp_bytes(shape: ModelShape, c: int, *, sparse: bool) -> float:
    if not sparse:
        return 4 * c * shape.intermediate_size
    experts = shape.experts
    router = 2 * FP32_BYTES * experts.count
    routed = experts.per_token * (2 * c * shape.hidden_size + 4 * c * experts.intermediate)
    return router + routed + 4 * c * experts.shared_intermediate


def activation_bytes(spec: JobSpec, shape: ModelShape, *, checkpointing: bool) -> float:
    kinds = {sparse: (count, layer_activation_bytes(spec, shape, sparse=sparse))
             for sparse, count in ((False, shape.dense_layers), (True, shape.moe_layers)) if count}
    if not checkpointing:
        return sum(count * per_layer for count, per_layer in kinds.values())
    layer_input = _compute_bytes(spec) * spec.micro_batch_size * spec.seq_len * shape.hidden_size
    return shape.num_layers * layer_input + max(per_layer for _count, per_layer in kinds.values())


def logits_bytes(spec: JobSpec, shape: ModelShape) -> float:
    tokens = spec.micro_batch_size * spec.seq_len
    return tokens * shape.vocab_size * (_compute_bytes(spec) + 2 * FP32_BYTES)
