"""Activation and logits memory of a decoder, per GPU, from the spec's micro-batch, sequence
length and the model's sizes.

Counted as the tensors autograd keeps for backward in Hugging Face's decoders with PyTorch's
fused attention kernels (no s x s score matrix is kept). Autograd keeps an operand only for
a gradient it must compute, so what a layer keeps depends on what trains: a frozen weight's
input is not kept, a trained one's is. Per token of a micro-batch (c = bytes of the compute
dtype, H = hidden size):
- each norm upcasts its input to fp32 and keeps that (4 bytes an element); when the norm's
  own weight trains (a full fine-tune) it keeps the normalized output too, for the weight's
  gradient (c; Gemma multiplies in fp32: 4);
- attention keeps the rotated q and k and the v it attends with (k and v at the query
  heads' width when a mask makes transformers repeat them for grouped-query attention), its
  output and its fp32 log-sum-exp; o_proj reads that output, so its input costs nothing more;
- a dense SwiGLU MLP keeps the gate output, the SiLU output and the up output;
- a linear layer's input is kept once for the linears that read it when their weights
  train (the norms' outputs for q/k/v and gate/up, the SwiGLU product for down_proj). A
  LoRA adapter with dropout keeps, for each adapted linear, its dropped copy of the input
  and the mask (c + 1); without dropout it keeps the shared input once; each keeps its r
  down-projected values for the up projection;
- a mixture-of-experts block keeps the router's fp32 logits and probabilities, and for each
  of the top-k experts a token is routed to, the gathered input, four SwiGLU tensors at the
  expert's width and the weighted output; the router keeps its input when it trains.
After the last layer the final norm (and, when the head trains, its input) and the loss:
at the start of backward, the fp32 log-softmax of the logits the loss kept, the gradient
arriving at it and the one it hands on (three fp32 copies of tokens x vocabulary). With
activation checkpointing each layer keeps only its input, and one layer at a time is
recomputed during backward.

With Liger's kernels (`kernels: liger`, or `auto` where it picks them: the plan is for a
GPU worker, which has liger-kernel; tunedeck/training_plan.py's auto_kernels) a norm keeps
only its c-byte input (and an fp32 scale per row), the SwiGLU only its gate and up outputs
(SiLU is recomputed in backward), and no logits exist: the fused linear cross-entropy
computes each chunk's logits and their gradient in forward and keeps the input's gradient
(c bytes per hidden unit), plus the output head's gradient when the head trains (a full
fine-tune).

Masks: a padded micro-batch (more than one row), packed rows and padding-free rows under
sdpa carry a boolean mask, which PyTorch's memory-efficient kernel (the one that takes a
mask) converts to an additive bias in the compute dtype on every layer's call and keeps for
backward. Flash attention's kernels need none of it. A micro-batch of rows that are all
exactly seq_len long has no mask at all; the plan cannot know that and counts one.

Objective dpo: two sequences per pair. Each micro-batch of micro_batch_size pairs is one
forward of 2 x micro_batch_size rows (the chosen answers, then the rejected ones), so every
term above is counted for twice the rows (`rows_per_micro_batch`), and the two rows of even
one pair are padded to each other (a mask). The answers' log-probabilities come from a
log-softmax over the vocabulary in fp32 of whole logits, counted as the loss's share above
(three fp32 copies of the rows' tokens x vocabulary): Liger's fused cross-entropy is not
used under dpo, so its "no whole logits" saving does not apply there (its norms and SwiGLU
still do, and the head's input is kept when the head trains). The reference model's forward
(the adapter off, or the frozen copy) runs under no_grad before the policy's and frees what
it made, so it adds nothing to this peak.
"""
from __future__ import annotations

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.model_shapes import ModelShape, is_adapted_linear
from tunedeck.training_plan import gpu_worker, kernels_on
from tunedeck.units import FP32_BYTES, compute_bytes

DROPOUT_MASK_BYTES = 1  # CUDA's dropout keeps a boolean mask
MASK_BYTES = 1  # a boolean attention mask entry
# Linears whose input is the layer's normalized hidden state (read by several projections).
_ATTENTION_INPUT = ("q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa")
_MLP_INPUT = ("gate_proj", "up_proj")


def _compute_bytes(spec: JobSpec) -> int:
    return compute_bytes(spec.precision)


def rows_per_micro_batch(spec: JobSpec) -> int:
    """The rows one forward carries: the micro-batch's examples, or under objective dpo two
    sequences per pair (its chosen and its rejected answer)."""
    return spec.micro_batch_size * (2 if spec.objective == "dpo" else 1)


def micro_batch_tokens(spec: JobSpec) -> int:
    """The tokens of one forward: its rows at seq_len."""
    return rows_per_micro_batch(spec) * spec.seq_len


def uses_fused_loss(spec: JobSpec, shape: ModelShape) -> bool:
    """Whether the loss is Liger's fused linear cross-entropy (no whole logits): with Liger's
    kernels, except under objectives dpo and grpo, whose log-probs need the logits."""
    return uses_liger(spec, shape) and spec.objective == "sft"


def uses_liger(spec: JobSpec, shape: ModelShape) -> bool:
    """Whether the job runs Liger's kernels on a GPU worker."""
    return kernels_on(spec, gpu_worker(shape.model_type)).kernels == "liger"


def _weights_train(spec: JobSpec) -> bool:
    return spec.method == "full"


def layer_activation_bytes(spec: JobSpec, shape: ModelShape, *, sparse: bool | None = None,
                           full_rows: bool = False) -> float:
    """What one decoder layer keeps for backward, for one micro-batch (the sparse layer of
    a mixture-of-experts model unless `sparse` says which; `full_rows`: see
    has_attention_mask)."""
    if sparse is None:
        sparse = shape.moe_layers > 0
    c = _compute_bytes(spec)
    liger = uses_liger(spec, shape)
    per_token = (shape.norms_per_layer * shape.hidden_size * _norm_bytes(spec, shape)
                 + shape.qk_norm_width * _norm_bytes(spec, shape)
                 + _attention_bytes(spec, shape, full_rows=full_rows)
                 + _mlp_bytes(shape, c, sparse=sparse, liger=liger)
                 + _linear_input_bytes(spec, shape, sparse=sparse))
    return micro_batch_tokens(spec) * per_token


def _norm_bytes(spec: JobSpec, shape: ModelShape) -> int:
    """What one norm keeps per normalized element."""
    if uses_liger(spec, shape):
        return _compute_bytes(spec)  # Liger's RMSNorm keeps its input
    if not _weights_train(spec):
        return FP32_BYTES
    normalized = FP32_BYTES if shape.model_type in ("gemma", "gemma2") else _compute_bytes(spec)
    return FP32_BYTES + normalized


def repeats_kv(spec: JobSpec, shape: ModelShape, *, full_rows: bool = False) -> bool:
    """Whether transformers repeats k and v to the query heads' count before sdpa: it
    passes grouped-query attention to PyTorch's kernel only when there is no mask."""
    return (spec.attention == "sdpa" and shape.num_kv_heads < shape.num_heads
            and has_attention_mask(spec, full_rows=full_rows))


def has_attention_mask(spec: JobSpec, *, full_rows: bool = False) -> bool:
    """Whether the micro-batches carry an attention mask: examples packed into one row, or
    padding between rows of different lengths. `full_rows`: every row is exactly seq_len
    long (the GPU benches' data), so a micro-batch of several rows has no padding. Under
    objective dpo a pair's chosen and rejected rows are padded to each other."""
    padded = rows_per_micro_batch(spec) > 1 and not full_rows
    return spec.padding_free or spec.packing or padded


def _attention_bytes(spec: JobSpec, shape: ModelShape, *, full_rows: bool = False) -> int:
    c = _compute_bytes(spec)
    if shape.attention_linears:  # DeepSeek's latent attention: its projections' outputs
        attention = shape.attention_shapes()
        return c * (sum(n_out for name, (_in, n_out) in attention.items() if name != "o_proj")
                    + attention["o_proj"][0])
    kv_width = shape.q_width if repeats_kv(spec, shape, full_rows=full_rows) else shape.kv_width
    return c * (2 * shape.q_width + 2 * kv_width) + FP32_BYTES * shape.num_heads


def _mlp_bytes(shape: ModelShape, c: int, *, sparse: bool, liger: bool = False) -> float:
    if not sparse:
        # Liger's SwiGLU recomputes the SiLU output in backward instead of keeping it.
        return (2 if liger else 3) * c * shape.intermediate_size
    experts = shape.experts
    router = 2 * FP32_BYTES * experts.count
    routed = experts.per_token * (2 * c * shape.hidden_size + 4 * c * experts.intermediate)
    # The shared expert's SwiGLU as a dense one's; its product is down_proj's input.
    return router + routed + 3 * c * experts.shared_intermediate


def _input_group(name: str) -> str | None:
    """Which kept tensor a linear reads as its input; None for o_proj, whose input is the
    attention output the attention already keeps."""
    prefix, _, leaf = name.rpartition(".")
    if leaf == "o_proj":
        return None
    if leaf in _ATTENTION_INPUT:
        return "attention input"
    if leaf in _MLP_INPUT or leaf.endswith("_gate"):
        return "mlp input"  # the shared expert and its gate read what the router reads
    return name  # its own input (down_proj's SwiGLU product, MLA's latents)


def _linear_input_bytes(spec: JobSpec, shape: ModelShape, *, sparse: bool) -> float:
    """The inputs the layer's linears keep for their gradients, per token."""
    c = _compute_bytes(spec)
    linears = shape.block_linears(sparse=sparse)
    if _weights_train(spec):
        groups = {_input_group(name): n_in for name, (n_in, _out) in linears.items()}
        if sparse:
            groups["mlp input"] = shape.hidden_size  # the router's own weight trains too
        return c * sum(n_in for group, n_in in groups.items() if group is not None)
    adapted = {name: n_in for name, (n_in, _out) in linears.items()
               if is_adapted_linear(name, spec.lora)}
    kept = spec.lora.r * c * len(adapted)  # each adapter's r-wide middle
    if spec.lora.dropout > 0:
        return kept + (c + DROPOUT_MASK_BYTES) * sum(adapted.values())
    groups = {_input_group(name): n_in for name, n_in in adapted.items()}
    if sparse and spec.lora.train_router:
        groups["mlp input"] = shape.hidden_size
    return kept + c * sum(n_in for group, n_in in groups.items() if group is not None)


def activation_bytes(spec: JobSpec, shape: ModelShape, *, full_rows: bool = False) -> float:
    """Everything a micro-batch's forward and backward hold at their peak: without
    checkpointing every layer's activations, the final norm's, the loss's and the masks';
    with it, every layer's input, the final norm's, and the larger of the loss's share (at
    the start of backward) and the one layer recomputed with its mask bias (later, once the
    loss's gradients are handed on)."""
    kinds = {sparse: (count, layer_activation_bytes(spec, shape, sparse=sparse,
                                                    full_rows=full_rows))
             for sparse, count in ((False, shape.dense_layers), (True, shape.moe_layers)) if count}
    final = final_norm_bytes(spec, shape)
    if not spec.activation_checkpointing:
        layers = sum(count * per_layer for count, per_layer in kinds.values())
        return (layers + final + logits_bytes(spec, shape)
                + attention_mask_bytes(spec, shape, full_rows=full_rows))
    layer_input = _compute_bytes(spec) * micro_batch_tokens(spec) * shape.hidden_size
    recomputed = (max(per_layer for _count, per_layer in kinds.values())
                  + attention_mask_bytes(spec, shape, full_rows=full_rows))
    return shape.num_layers * layer_input + final + max(logits_bytes(spec, shape), recomputed)


def final_norm_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """The norm after the last layer, and its output when the output head trains (the
    head's input, for the head's gradient; Liger's fused loss takes that in forward)."""
    tokens = micro_batch_tokens(spec)
    head_input = (_compute_bytes(spec)
                  if _weights_train(spec) and not uses_fused_loss(spec, shape) else 0)
    return tokens * shape.hidden_size * (_norm_bytes(spec, shape) + head_input)


def logits_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """The loss's share at its peak, the start of backward: the fp32 log-softmax the loss
    kept, the gradient that reaches it and the one it hands back (three fp32 copies of the
    logits); or with Liger's fused linear cross-entropy what it keeps instead
    (`fused_loss_bytes`). Objective dpo counts the same three fp32 copies for its answers'
    log-softmax, of its two rows a pair (Liger's fused loss is not used there)."""
    if uses_fused_loss(spec, shape):
        return fused_loss_bytes(spec, shape)
    if spec.objective == "grpo":  # the completion's logits only (and the one before it)
        tokens = rows_per_micro_batch(spec) * (spec.grpo.max_completion_length + 1)
        return tokens * shape.vocab_size * 3 * FP32_BYTES
    return micro_batch_tokens(spec) * shape.vocab_size * 3 * FP32_BYTES


def fused_loss_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """Liger's fused linear cross-entropy at its peak: the gradient of its input (kept for
    backward), the logits of one chunk of tokens (Liger sizes a chunk so that it holds
    about tokens x hidden entries: the tokens over ceil(vocab / hidden), rounded up to a
    power of two) and, when the head trains, the head's gradient, all in the compute dtype."""
    c = _compute_bytes(spec)
    tokens = micro_batch_tokens(spec)
    hidden, vocab = shape.hidden_size, shape.vocab_size
    chunks = -(-vocab // hidden)
    chunk_tokens = min(_next_power_of_two(-(-tokens // chunks)), tokens)
    head_gradient = c * vocab * hidden if spec.method == "full" else 0
    return c * tokens * hidden + c * chunk_tokens * vocab + head_gradient


def _next_power_of_two(number: int) -> int:
    return 1 << max(0, number - 1).bit_length()


def attention_mask_bytes(spec: JobSpec, shape: ModelShape, *, full_rows: bool = False) -> float:
    """The boolean mask of a micro-batch (its rows' s x s, two rows a pair under dpo, or for
    padding-free rows one row of micro_batch_size x seq_len tokens), and the bias in the
    compute dtype sdpa's memory-efficient kernel makes of it and keeps on every layer (the
    one recomputed layer's with checkpointing). Flash attention's kernels need none of it."""
    if spec.attention != "sdpa" or not has_attention_mask(spec, full_rows=full_rows):
        return 0.0
    if spec.padding_free:
        rows, length = 1, spec.micro_batch_size * spec.seq_len
    else:
        rows, length = rows_per_micro_batch(spec), spec.seq_len
    layers_keeping_a_bias = 1 if spec.activation_checkpointing else shape.num_layers
    return (MASK_BYTES + layers_keeping_a_bias * _compute_bytes(spec)) * rows * length * length
