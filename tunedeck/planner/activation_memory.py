"""Activation and logits memory of a Llama-family decoder, per GPU, from the spec's
micro-batch, sequence length and the model's sizes.

Counted as the tensors autograd keeps for backward in Hugging Face's Llama with PyTorch's
memory-efficient attention (no s x s score matrix is kept), per token of a micro-batch:
- each RMSNorm upcasts to fp32: its fp32 input, its normalized output and the scaled output
  the next linear keeps (4 + c + c bytes per hidden unit; two norms a layer);
- attention keeps q, k and v (k and v at the key/value head count), its output, and the
  contiguous copy of that output o_proj keeps;
- the SwiGLU MLP keeps the gate output, the SiLU output, the up output and their product;
- LoRA with dropout keeps a dropped copy of each adapted linear's input, and its mask.
With activation checkpointing each layer keeps only its input, and one layer at a time is
recomputed during backward. The logits are made in the compute dtype, upcast to fp32 for
the loss, and the loss keeps an fp32 log-softmax (c + 8 bytes per vocabulary entry).
"""
from __future__ import annotations

from tunedeck.job_spec import JobSpec
from tunedeck.planner.model_shapes import ModelShape

FP32_BYTES = 4
DROPOUT_MASK_BYTES = 1


def _compute_bytes(spec: JobSpec) -> int:
    return FP32_BYTES if spec.precision == "fp32" else 2


def layer_activation_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """What one decoder layer keeps for backward, for one micro-batch."""
    c = _compute_bytes(spec)
    tokens = spec.micro_batch_size * spec.seq_len
    q_width = shape.num_heads * shape.head_dim
    kv_width = shape.num_kv_heads * shape.head_dim
    norms = 2 * (FP32_BYTES + 2 * c) * shape.hidden_size
    attention = c * (q_width + 2 * kv_width) + 2 * c * q_width
    mlp = 4 * c * shape.intermediate_size
    per_token = norms + attention + mlp
    if spec.method != "full" and spec.lora.dropout > 0:
        adapted_inputs = sum(n_in for n_in, _ in shape.adapted_linears(spec.lora.target_modules).values())
        per_token += (c + DROPOUT_MASK_BYTES) * adapted_inputs
    return tokens * per_token


def activation_bytes(spec: JobSpec, shape: ModelShape, *, checkpointing: bool) -> float:
    per_layer = layer_activation_bytes(spec, shape)
    if not checkpointing:
        return shape.num_layers * per_layer
    layer_input = _compute_bytes(spec) * spec.micro_batch_size * spec.seq_len * shape.hidden_size
    return shape.num_layers * layer_input + per_layer


def logits_bytes(spec: JobSpec, shape: ModelShape) -> float:
    tokens = spec.micro_batch_size * spec.seq_len
    return tokens * shape.vocab_size * (_compute_bytes(spec) + 2 * FP32_BYTES)
