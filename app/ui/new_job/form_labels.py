"""What each field of the New job form is called, and the spec's problems named by the field
that shows them: the labels, the field beside a spec location, and the problem lines as the
form prints them."""
from __future__ import annotations

import html

COLUMN_ROLES = ("prompt", "response", "messages", "system")  # the spec's `columns` fields

# Form field name -> the label the form shows; the order is the order of the tab's inputs.
FORM_LABELS: dict[str, str] = {
    "name": "Name",
    "model": "Model",
    "dataset": "Dataset",
    "dataset_config": "Dataset config",
    "dataset_split": "Dataset split",
    "columns_prompt": "Prompt column",
    "columns_response": "Response column",
    "columns_messages": "Messages column",
    "columns_system": "System prompt column",
    "method": "Method",
    "backend": "Backend",
    "precision": "Precision",
    "num_gpus": "GPUs",
    "gpu_memory_gb": "GPU memory (GB)",
    "max_steps": "Steps",
    "epochs": "Epochs",
    "learning_rate": "Learning rate",
    "micro_batch_size": "Micro batch size",
    "grad_accum": "Gradient accumulation",
    "seq_len": "Sequence length",
    "lr_schedule": "Learning-rate schedule",
    "warmup_steps": "Warmup steps",
    "weight_decay": "Weight decay",
    "max_grad_norm": "Max gradient norm",
    "seed": "Seed",
    "packing": "Pack sequences",
    "kernels": "Kernels",
    "attention": "Attention",
    "padding_free": "Padding-free batches",
    "fused_optimizer": "Fused AdamW",
    "eval_split": "Eval split",
    "eval_dataset": "Eval dataset",
    "eval_dataset_split": "Eval dataset split",
    "eval_every_steps": "Eval every (steps)",
    "checkpoint_every_steps": "Checkpoint every (steps)",
    "keep_checkpoints": "Keep checkpoints",
    "export_dtype": "Merged weights dtype",
    "report_to": "Report to",
    "lora_r": "LoRA rank",
    "lora_alpha": "LoRA alpha",
    "lora_dropout": "LoRA dropout",
    "lora_experts": "Adapters on expert weights",
    "lora_train_router": "Train the router",
    "zero2_offload_optimizer": "Offload optimizer to CPU",
    "zero2_overlap_comm": "Overlap communication",
    "zero2_contiguous_gradients": "Contiguous gradients",
    "zero2_reduce_bucket_size": "Reduce bucket size",
    "zero2_allgather_bucket_size": "All-gather bucket size",
    "zero2_activation_checkpointing": "Activation checkpointing",
    "fsdp_sharding_strategy": "Sharding strategy",
    "fsdp_cpu_offload": "CPU offload",
    "fsdp_activation_checkpointing": "Activation checkpointing",
    "fsdp_param_dtype": "Compute dtype",
    "fsdp_reduce_dtype": "Gradient reduce dtype",
    "fsdp_buffer_dtype": "Buffer dtype",
    "fsdp_backward_prefetch": "Backward prefetch",
    "fsdp_forward_prefetch": "Forward prefetch",
    "fsdp_compile": "torch.compile",
}
FORM_FIELDS: tuple[str, ...] = tuple(FORM_LABELS)

# A spec's error location (as format_validation_error spells it) -> the form label.
SPEC_FIELD_LABELS: dict[str, str] = {
    **{field: label for field, label in FORM_LABELS.items()
       if not field.startswith(("lora_", "zero2_", "fsdp_", "columns_"))},
    **{f"columns.{role}": FORM_LABELS[f"columns_{role}"] for role in COLUMN_ROLES},
    "lora.r": FORM_LABELS["lora_r"],
    "lora.alpha": FORM_LABELS["lora_alpha"],
    "lora.dropout": FORM_LABELS["lora_dropout"],
    "zero2.reduce_bucket_size": FORM_LABELS["zero2_reduce_bucket_size"],
    "zero2.allgather_bucket_size": FORM_LABELS["zero2_allgather_bucket_size"],
    "fsdp": FORM_LABELS["fsdp_sharding_strategy"],
    **{f"fsdp.{name}": FORM_LABELS[f"fsdp_{name}"]
       for name in ("param_dtype", "reduce_dtype", "buffer_dtype")},
}


# A spec location (`lora.r`, `columns.prompt`, `learning_rate`) -> the form field showing it.
_FORM_FIELD_AT = {**{name: name for name in FORM_LABELS},
                  **{name.replace("_", ".", 1): name for name in FORM_LABELS
                     if name.startswith(("lora_", "zero2_", "fsdp_", "columns_"))}}


def field_errors(problems: str) -> dict[str, str]:
    """Each form field a problem line names, with the problem (lines naming no field of the
    form, e.g. "spec: set max_steps or epochs", are left to the form's message)."""
    errors: dict[str, str] = {}
    for line in problems.splitlines():
        location, separator, message = line.partition(": ")
        name = _FORM_FIELD_AT.get(location) if separator else None
        if name is not None:
            errors[name] = f"{errors[name]}; {message}" if name in errors else message
    return errors


def label_fields(problems: str) -> str:
    """'lora.r: must be ...' -> 'LoRA rank (lora.r): must be ...'."""
    lines = []
    for line in problems.splitlines():
        field, separator, message = line.partition(": ")
        label = SPEC_FIELD_LABELS.get(field)
        lines.append(f"{label} ({field}): {message}" if separator and label else line)
    return "\n".join(lines)


def problems_markdown(problems: str) -> str:
    """The problems in the theme's error colour (HTML: Markdown has no colour)."""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in problems.splitlines())
    return f'<div class="field-error"><strong>Please fix:</strong><ul>{items}</ul></div>'


def problem_fields(problems: str) -> list[str]:
    """The field names of the problem lines ("spec" for those naming no field)."""
    return [line.partition(": ")[0] for line in problems.splitlines()]
