"""What objective grpo's sampling holds on a rank, beside what its training step holds.

Each round a rank generates micro_batch_size × grad_accum completions at once (whole groups
of grpo.num_generations; trainer/objectives/grpo.py), under no gradients: the KV cache of
every row at its longest (seq_len: the prompt and the completion share a row), the prefill's
widest temporaries (the prompts' MLP activations of one layer), and each new token's logits
in fp32. Under FSDP the root's own parameters (embeddings, head) are gathered whole for the
call. None of it coexists with the training step's activations (sampling ends before the
first forward of the step), so the plan counts the larger of the two.

Pure arithmetic on the spec and the model's shape, as the rest of the planner.
"""
from __future__ import annotations

from tunedeck.spec.job_spec import JobSpec
from tunedeck.planner.model_shapes import ModelShape
from tunedeck.units import FP32_BYTES, compute_bytes

# Copies of a new token's logits a sampling step holds: the logits, the warped ones and
# their softmax.
SAMPLING_LOGITS_COPIES = 3


def round_rows(spec: JobSpec) -> int:
    """The completions a rank samples in one go: a round, the step's whole batch."""
    return spec.micro_batch_size * spec.grad_accum


def kv_cache_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """Keys and values of every layer for every row of the round at its longest."""
    return (round_rows(spec) * spec.seq_len * shape.num_layers * 2 * shape.kv_width
            * compute_bytes(spec.precision))


def prefill_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """The prompts' forward (no gradients): one layer's widest temporaries at a time, the
    MLP's gate, up and their product."""
    prompt_tokens = round_rows(spec) * (spec.seq_len - spec.grpo.max_completion_length)
    return prompt_tokens * 3 * shape.intermediate_size * compute_bytes(spec.precision)


def sampling_logits_bytes(spec: JobSpec, shape: ModelShape) -> float:
    return round_rows(spec) * shape.vocab_size * FP32_BYTES * SAMPLING_LOGITS_COPIES


def gathered_root_bytes(spec: JobSpec, shape: ModelShape) -> float:
    """FSDP's root parameters gathered whole for the call: the embeddings, and the output
    head when it is not tied to them."""
    matrices = 1 if shape.tie_word_embeddings else 2
    return matrices * shape.vocab_size * shape.hidden_size * compute_bytes(spec.precision)


def sampling_bytes(spec: JobSpec, shape: ModelShape, *, sharded: bool) -> float:
    """A round's sampling at its peak on a rank (0 for another objective); `sharded`: the
    strategy shards the parameters (FSDP), whose root is gathered for the call."""
    if spec.objective != "grpo":
        return 0.0
    root = gathered_root_bytes(spec, shape) if sharded else 0.0
    return (kv_cache_bytes(spec, shape) + max(prefill_bytes(spec, shape),
                                              sampling_logits_bytes(spec, shape)) + root)


def sampling_note(spec: JobSpec, shape: ModelShape, *, sampling: float,
                  activations: float) -> str:
    """The plan's words for what sampling adds, and the levers that shrink it."""
    from tunedeck.units import GB, format_size

    rows = round_rows(spec)
    larger = "sampling" if sampling > activations else "the training step"
    return (f"objective grpo: a round samples {rows} completions at once (micro_batch_size × "
            f"grad_accum), holding a KV cache of {format_size(kv_cache_bytes(spec, shape) / GB)} "
            f"({rows} rows × seq_len {spec.seq_len}); sampling needs "
            f"{format_size(sampling / GB)}, a training micro-batch's activations "
            f"{format_size(activations / GB)}: {larger} sets the peak. Fewer completions a "
            "step (a smaller micro_batch_size × grad_accum, with grpo.num_generations "
            "dividing it), a shorter grpo.max_completion_length and seq_len shrink the "
            "first; activation checkpointing the second")
