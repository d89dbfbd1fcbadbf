"""The fine-tuning method: which parameters train. `lora` adds a peft adapter over a frozen
base; `qlora` adds the same adapter over a base loaded in 4-bit NF4 (see model_source);
`full` trains every weight. Which weights an adapter lands on is trainer.model.lora_targets'
answer; this module tells peft, and checks that peft did exactly that."""
from __future__ import annotations

from tunedeck.spec.job_spec import JobSpec
from tunedeck.spec.sections import LoraSettings

from trainer.model.lora_targets import LoraTargets, resolve_lora_targets


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
    targets = resolve_lora_targets(model, spec.lora)
    adapted = get_peft_model(model, lora_config(spec.lora, targets, model))
    check_adapted_as_resolved(adapted, targets, model_type=model.config.model_type)
    if targets.uses_parameter_adapters:
        restore_linear_dropout(adapted, spec.lora.dropout)
    return adapted


def set_training_mode(model, spec: JobSpec) -> None:
    """Train mode, and activation checkpointing where the spec asks for it.

    from_pretrained hands the model back in eval mode; peft's wrapper turns an adapter's
    model to train mode, but a full fine-tune stayed in eval mode, where transformers'
    layers never checkpoint (they recompute only while training: the planner's
    checkpointed peak was not what ran), Liger's forward takes the loss from whole logits,
    and MoE routers skip their training-time behaviour."""
    model.train()
    if spec.activation_checkpointing:
        # Non-reentrant checkpointing composes with FSDP2, DeepSpeed and frozen (LoRA) inputs.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


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


def lora_config(settings: LoraSettings, targets: LoraTargets, model):
    """Explicit names, never peft's "all-linear" (peft's own would adapt a Mixtral router).
    lora.ParamWrapper (the fused expert weights) refuses a dropout, and peft's config has one
    dropout for all: with expert adapters it is 0 here, and restore_linear_dropout gives the
    linear layers theirs back. The saved adapter_config.json then says 0, which is also what
    a reload of an adapter with expert weights needs."""
    from peft import LoraConfig

    modules, parameters = peft_target_names(targets)
    return LoraConfig(
        r=settings.r, lora_alpha=settings.alpha,
        lora_dropout=0.0 if parameters else settings.dropout,
        target_modules=modules, target_parameters=parameters or None,
        modules_to_save=list(targets.router_modules) if targets.train_router else None,
        task_type="CAUSAL_LM", bias="none",
    )


def peft_target_names(targets: LoraTargets) -> tuple[list[str], list[str]]:
    """(target_modules, target_parameters) as peft must be told: the linears peft would
    rewrite into fused expert weights are named by their weight (lora_targets'
    `linear_by_weight`)."""
    by_weight = set(targets.linear_by_weight)
    kept = [name for name in targets.linear_modules if name not in by_weight]
    return kept, [*targets.expert_parameters, *(f"{name}.weight" for name in targets.linear_by_weight)]


def check_adapted_as_resolved(adapted, targets: LoraTargets, *, model_type: str) -> None:
    """peft must adapt exactly the names it was given: a silent difference would train (and
    merge) other weights than the form showed. Compared with the resolved names, not with
    the config peft was given: from 20 names on, peft rewrites its config's target_modules
    into the shortest suffixes that match them (`q_proj`, ...)."""
    base = adapted.base_model
    done_parameters = getattr(base, "targeted_parameter_names", [])
    modules, parameters = peft_target_names(targets)
    for kind, asked, done in (("modules", modules, base.targeted_module_names),
                              ("parameters", parameters, done_parameters)):
        missing, extra = set(asked or ()) - set(done), set(done) - set(asked or ())
        if missing or extra:
            raise ValueError(f"model type {model_type}: peft adapted other {kind} than resolved "
                             f"(missing {sorted(missing)[:3]}, extra {sorted(extra)[:3]}); "
                             "list lora.target_modules explicitly, or use method full")


def restore_linear_dropout(model, dropout: float) -> None:
    """The spec's dropout on every adapter but the fused expert ones: what peft builds for a
    linear layer when its config's dropout is set (lora_B(lora_A(dropout(x))))."""
    import torch
    from peft.tuners.lora.layer import LoraLayer, ParamWrapper

    if dropout == 0:
        return
    for module in model.modules():
        if isinstance(module, LoraLayer) and not isinstance(module, ParamWrapper):
            for adapter_name in module.lora_dropout:
                module.lora_dropout[adapter_name] = torch.nn.Dropout(p=dropout)


def trainable_parameters(model) -> list:
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


def trainable_parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in trainable_parameters(model))
