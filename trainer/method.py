"""The fine-tuning method: which parameters train. `lora` adds a peft adapter over a frozen
base; `full` trains every weight. (`qlora` is refused by the job spec for now.)"""
from __future__ import annotations

from tunedeck.job_spec import JobSpec, LoraSettings


def apply_method(model, spec: JobSpec):
    """The model to train; call it on every rank after the same seed."""
    if spec.method == "lora":
        from peft import get_peft_model

        return get_peft_model(model, lora_config(spec.lora))
    if spec.method == "full":
        model.requires_grad_(True)
        return model
    raise ValueError(f"method {spec.method}: not supported by this trainer; use lora or full")


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
