"""The fine-tuning method: which parameters train. `lora` adds a peft adapter over a frozen
base; `qlora` adds the same adapter over a base loaded in 4-bit NF4 (see model_source);
`full` trains every weight."""
from __future__ import annotations

from tunedeck.job_spec import JobSpec, LoraSettings


def uses_adapter(spec: JobSpec) -> bool:
    return spec.method in ("lora", "qlora")


def apply_method(model, spec: JobSpec):
    """The model to train; call it on every rank after the same seed. Export calls it too,
    over a full-precision load: a QLoRA adapter then lands on fp32 weights, not 4-bit ones."""
    if spec.method == "full":
        model.requires_grad_(True)
        return model
    if not uses_adapter(spec):
        raise ValueError(f"method {spec.method}: not supported by this trainer; use lora, qlora or full")
    from peft import get_peft_model

    if getattr(model, "is_loaded_in_4bit", False):
        prepare_quantized_base(model)
    return get_peft_model(model, lora_config(spec.lora))


def prepare_quantized_base(model) -> None:
    """peft's k-bit preparation, then bitsandbytes' CPU repacking turned off (below).

    peft's gradient checkpointing (on by default) stays off: it is the spec's
    `activation_checkpointing` switch (train.py applies it, non-reentrant, for every method),
    and a silent third more compute is not ours to choose. What remains freezes the base
    and upcasts any fp16/bf16 weight that is not 4-bit to fp32; the base loads in fp32, so
    today that is a no-op kept as a guard. The backend still decides the
    compute dtype (DeepSpeed casts the non-4-bit weights to bf16/fp16 for forward; 4-bit
    weights are uint8 and stay as they are, dequantized to the compute dtype per matmul)."""
    from bitsandbytes.nn import Linear4bit
    from peft import prepare_model_for_kbit_training

    prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    for module in model.modules():
        if isinstance(module, Linear4bit):
            # On CPUs with AVX512-BF16, bitsandbytes repacks a 4-bit weight in place for a
            # faster inference kernel on the first eval-mode forward without gradients (an
            # evaluation), and from then on runs that kernel, which has no backward: every
            # later training step got LoRA gradients over 100% off in our test (and under
            # FSDP2 the re-gathered bytes no longer match the repacked state). Training and
            # evaluation keep the one layout the adapter is trained against.
            module.support_avx512bf16_for_cpu = False


def lora_config(settings: LoraSettings):
    from peft import LoraConfig

    target_modules = settings.target_modules
    if not isinstance(target_modules, str):
        target_modules = list(target_modules)
    return LoraConfig(
        r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
        target_modules=target_modules, task_type="CAUSAL_LM", bias="none",
    )


def trainable_parameters(model) -> list:
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


def trainable_parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in trainable_parameters(model))
