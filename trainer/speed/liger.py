"""Liger Kernel (`kernels: liger`): Triton kernels for RMSNorm, RoPE, SwiGLU and a fused
linear cross-entropy that takes the loss chunk by chunk from the last hidden states and the
output head's weight, so the (tokens x vocabulary) logits are never made whole.

Liger patches the model's modules in place (and its family's causal-LM forward, so the
loss is taken inside the model: the backends then ask the model for the summed loss,
trainer/token_loss.py). Applied to the base model before any adapter wraps it, as Liger's
own docs say; peft and both backends then see the patched modules."""
from __future__ import annotations


def liger_model_types() -> frozenset[str]:
    """The model families (config.model_type) this Liger version patches."""
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    return frozenset(MODEL_TYPE_TO_APPLY_LIGER_FN)


def liger_family_problem(model_type: str, supported: frozenset[str]) -> str | None:
    if model_type in supported:
        return None
    return (f"kernels liger: Liger Kernel has no kernels for model family {model_type!r} "
            f"(it patches {', '.join(sorted(supported))}); set kernels to none")


def apply_liger_kernels(model) -> None:
    """Patch `model` (a transformers causal LM, before any adapter) with Liger's kernels:
    RMSNorm, RoPE and SwiGLU where the family has them, and the fused linear
    cross-entropy in place of the logits' loss. Raises ValueError for a family Liger does
    not patch (the caller checked it before the weights loaded; this is the guard)."""
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    model_type = model.config.model_type
    problem = liger_family_problem(model_type, liger_model_types())
    if problem:
        raise ValueError(problem)
    _apply_liger_kernel_to_instance(model=model, rope=True, rms_norm=True, swiglu=True,
                                    cross_entropy=False, fused_linear_cross_entropy=True)
