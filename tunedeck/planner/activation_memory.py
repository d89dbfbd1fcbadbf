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

With Liger's kernels (`kernels: liger`) a norm keeps only its c-byte input (and an fp32
scale per row), the SwiGLU only its gate and up outputs (SiLU is recomputed in backward),
and no logits exist: the fused linear cross-entropy computes each chunk's logits and their
gradient in forward and keeps the input's gradient (c bytes per hidden unit), plus the
output head's gradient when the head trains (a full fine-tune). Padding-free rows under
sdpa carry a boolean block-diagonal mask over the whole micro-batch's row.
"""
from __future__ import annotations

from tunedeck.job_spec import JobSpec
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import FP32_BYTES, compute_bytes

DROPOUT_MASK_BYTES = 1
MASK_BYTES = 1  # a boolean attention mask entry


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
    liger = spec.kernels == "liger"
    # Liger's RMSNorm keeps its c-byte input, not an fp32 copy and a normalized output.
    layer_norm_bytes = 2 * c if liger else FP32_BYTES + 2 * c
    norms = (shape.norms_per_layer * shape.hidden_size * layer_norm_bytes
             + shape.qk_norm_width * (FP32_BYTES + 2 * c))
    per_token = norms + c * sum(n_out for name, (_in, n_out) in attention.items()
                                if name != "o_proj") + 2 * c * out_width
    per_token += _mlp_bytes(shape, c, sparse=sparse, liger=liger)
    if spec.method != "full" and spec.lora.dropout > 0:
        adapted = [n_in for n_in, _out, _layers in shape.adapted_linears(spec.lora, sparse=sparse)]
        per_token += (c + DROPOUT_MASK_BYTES) * sum(adapted)
    return tokens * per_token


def _mlp_bytes(shape: ModelShape, c: int, *, sparse: bool, liger: bool = False) -> float:
    if not sparse:
        # Liger's SwiGLU recomputes the SiLU output in backward instead of keeping it.
        return (3 if liger else 4) * c * shape.intermediate_size
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
    """The loss's share: the logits and their fp32 log-softmax, or with Liger's fused linear
    cross-entropy what it keeps instead (`fused_loss_bytes`)."""
    if spec.kernels == "liger":
        return fused_loss_bytes(spec, shape)
    tokens = spec.micro_batch_size * spec.seq_len
    return tokens * shape.vocab_size * (_compute_bytes(spec) + 2 * FP32_BYTES)


def fused_loss_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """Liger's fused linear cross-entropy at its peak: the gradient of its input (kept for
    backward), the logits of one chunk of tokens (Liger sizes a chunk so that it holds
    about tokens x hidden entries: the tokens over ceil(vocab / hidden), rounded up to a
    power of two) and, when the head trains, the head's gradient, all in the compute dtype."""
    c = _compute_bytes(spec)
    tokens = spec.micro_batch_size * spec.seq_len
    hidden, vocab = shape.hidden_size, shape.vocab_size
    chunks = -(-vocab // hidden)
    chunk_tokens = min(_next_power_of_two(-(-tokens // chunks)), tokens)
    head_gradient = c * vocab * hidden if spec.method == "full" else 0
    return c * tokens * hidden + c * chunk_tokens * vocab + head_gradient


def _next_power_of_two(number: int) -> int:
    return 1 << max(0, number - 1).bit_length()


def attention_mask_bytes(spec: JobSpec, shape: ModelShape, *, checkpointing: bool) -> float:
    """A padding-free micro-batch is one row of micro_batch_size x seq_len tokens at most.
    Under sdpa, transformers turns its restarting positions into a boolean block-diagonal
    causal mask over that whole row, and PyTorch's memory-efficient kernel (the one that
    takes a mask) converts it to an additive bias in the compute dtype on every layer's
    call and keeps that for backward: every layer's without checkpointing, the one
    recomputed layer's with it. Flash attention's varlen kernel needs none of it."""
    if not spec.padding_free or spec.attention != "sdpa":
        return 0.0
    row = spec.micro_batch_size * spec.seq_len
    layers_keeping_a_bias = 1 if checkpointing else shape.num_layers
    return (MASK_BYTES + layers_keeping_a_bias * _compute_bytes(spec)) * row * row
