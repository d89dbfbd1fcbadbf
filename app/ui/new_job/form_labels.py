"""What each field of the New job form is called, and the spec's problems named by the field
that shows them: the labels, the field beside a spec location, and the problem lines as the
form prints them."""
from __future__ import annotations

import html

from app.ui.new_job.typed_fields import TypedField, typed_field
from tunedeck.spec.job_spec import JobSpec, spec_field

# The spec's `columns` fields. An objective reads some of them: sft a prompt and its response
# (or a chat), dpo a prompt with a chosen and a rejected answer; the prompt (and system) both.
COLUMN_ROLES = ("prompt", "response", "messages", "system", "chosen", "rejected")
OBJECTIVE_COLUMN_ROLES = {"sft": ("prompt", "response", "messages", "system"),
                          "dpo": ("prompt", "system", "chosen", "rejected")}

# The fields the form lays out by hand (app/ui/tabs/new_job_fields.py), in the order of the
# tab's inputs: a spec field's name, or a section's field as SECTION_FIELD (`lora_r`,
# `zero2_offload_optimizer`, `columns_prompt`). Every other top-level spec field is made
# from its type (TYPED_FIELDS), unless LEFT_OUT names it.
LAID_OUT_FIELDS = (
    "name", "model", "dataset", "dataset_config", "dataset_split", "columns_prompt",
    "columns_response", "columns_messages", "columns_system", "columns_chosen",
    "columns_rejected", "objective", "method", "backend", "precision",
    "num_gpus", "gpu_memory_gb", "max_steps", "epochs", "learning_rate", "micro_batch_size",
    "grad_accum", "seq_len", "lr_schedule", "warmup_steps", "weight_decay", "max_grad_norm",
    "seed", "packing", "kernels", "attention", "padding_free", "fused_optimizer", "eval_split",
    "eval_dataset", "eval_dataset_split", "eval_every_steps", "checkpoint_every_steps",
    "keep_checkpoints", "export_dtype", "report_to", "lora_r", "lora_alpha", "lora_dropout",
    "lora_experts", "lora_train_router", "dpo_beta", "dpo_loss", "dpo_label_smoothing",
    "dpo_reference", "dpo_sft_weight", "dpo_simpo_gamma", "zero2_offload_optimizer",
    "zero2_overlap_comm", "zero2_contiguous_gradients", "zero2_reduce_bucket_size",
    "zero2_allgather_bucket_size", "zero2_activation_checkpointing", "fsdp_sharding_strategy",
    "fsdp_cpu_offload", "fsdp_activation_checkpointing", "fsdp_param_dtype", "fsdp_reduce_dtype",
    "fsdp_buffer_dtype", "fsdp_backward_prefetch", "fsdp_forward_prefetch", "fsdp_compile")
SECTIONS = ("lora_", "zero2_", "fsdp_", "columns_", "dpo_")
# The spec fields the form has no input for, and why (a preset with one says so on Load).
# Deleting a top-level field's line gives it an input made from its type.
LEFT_OUT = {
    "num_nodes": "the form plans one host's ranks; several nodes are a spec's",
    "queue": "placement: a spec's, the API's or the CLI's",
    "host": "placement: a spec's, the API's or the CLI's",
    "max_restarts": "a spec's, the API's or the CLI's",
    "trust_remote_code": "an admin's, in a spec",
    "lora.target_modules": "`all-linear` or module names: a spec's (What LoRA adapts shows them)",
}
_SECTION_NAMES = tuple(prefix.rstrip("_") for prefix in SECTIONS)
# The top-level spec fields neither laid out by hand nor left out, in the spec's order: each
# an input made from its type, in the form's "Other options".
TYPED_FIELDS: dict[str, TypedField] = {
    name: typed
    for name, field in JobSpec.model_fields.items()
    if name not in LAID_OUT_FIELDS and name not in LEFT_OUT and name not in _SECTION_NAMES
    and (typed := typed_field(name, field)) is not None}
# The form's spec fields, in the order of the tab's inputs.
SPEC_FORM_FIELDS = (*LAID_OUT_FIELDS, *TYPED_FIELDS)
# The form's own fields, which are no spec field: the card size is the memory plan's.
FORM_ONLY_LABELS = {"gpu_memory_gb": "GPU memory (GB)"}


def spec_location(form_field: str) -> str:
    """`lora_r` -> `lora.r`; a top-level field is its own name."""
    return form_field.replace("_", ".", 1) if form_field.startswith(SECTIONS) else form_field


# Form field name -> its label: the spec field's own title (tunedeck/spec/job_spec.py).
FORM_LABELS: dict[str, str] = {
    name: FORM_ONLY_LABELS.get(name) or spec_field(spec_location(name)).title
    for name in SPEC_FORM_FIELDS}
FORM_FIELDS: tuple[str, ...] = tuple(FORM_LABELS)

# A spec's error location (as format_validation_error spells it) -> the form label.
SPEC_FIELD_LABELS: dict[str, str] = {
    **{field: label for field, label in FORM_LABELS.items()
       if not field.startswith(SECTIONS)},
    **{f"columns.{role}": FORM_LABELS[f"columns_{role}"] for role in COLUMN_ROLES},
    "lora.r": FORM_LABELS["lora_r"],
    "lora.alpha": FORM_LABELS["lora_alpha"],
    "lora.dropout": FORM_LABELS["lora_dropout"],
    "zero2.reduce_bucket_size": FORM_LABELS["zero2_reduce_bucket_size"],
    "zero2.allgather_bucket_size": FORM_LABELS["zero2_allgather_bucket_size"],
    "fsdp": FORM_LABELS["fsdp_sharding_strategy"],
    **{f"fsdp.{name}": FORM_LABELS[f"fsdp_{name}"]
       for name in ("param_dtype", "reduce_dtype", "buffer_dtype")},
    # The preference settings: each field, and the section's own rules between them.
    "dpo": spec_field("dpo").title,
    **{spec_location(name): FORM_LABELS[name] for name in FORM_LABELS
       if name.startswith("dpo_")},
}


# A spec location (`lora.r`, `columns.prompt`, `learning_rate`) -> the form field showing it.
_FORM_FIELD_AT = {**{name: name for name in FORM_LABELS},
                  **{spec_location(name): name for name in FORM_LABELS}}


def field_errors(problems: str) -> dict[str, str]:
    """Each form field a problem line names, with the problem (lines naming no field of the
    form, e.g. "spec: set max_steps or epochs", are left to the form's message)."""
    errors: dict[str, str] = {}
    for line in problems.splitlines():
        location, separator, message = line.partition(": ")
        if not separator:
            continue
        name = _FORM_FIELD_AT.get(location)
        if name is None:
            name, message = _field_a_rule_names(location, message)
        if name is not None:
            errors[name] = f"{errors[name]}; {message}" if name in errors else message
    return errors


def _field_a_rule_names(location: str, message: str) -> tuple[str | None, str]:
    """(the form field a rule between fields is about, its message), where the message
    starts by naming it: "spec: packing: objective dpo ..." -> packing; "dpo: label_smoothing
    applies ..." -> dpo_label_smoothing. Other spec-wide lines stay the form message's alone."""
    if location == "spec":
        head, separator, rest = message.partition(": ")
        if separator and head in ("packing", "padding_free"):  # objective dpo's rule
            return _FORM_FIELD_AT[head], rest
    if location == "dpo":
        return _FORM_FIELD_AT.get(f"dpo.{message.split(' ', 1)[0]}"), message
    return None, message


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
