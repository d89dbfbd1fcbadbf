"""The spec's problems named by the New job form's field that shows them: the label of a spec
location (form_layout's labels are the spec's titles), the field beside it, and the problem
lines as the form prints them."""
from __future__ import annotations

import html

from app.ui.new_job.form_layout import FORM_LABELS, SPEC_FORM_FIELDS, spec_location
from tunedeck.spec.job_spec import spec_field

# A spec's error location (as format_validation_error spells it) -> the form label.
SPEC_FIELD_LABELS: dict[str, str] = {
    **{spec_location(key): FORM_LABELS[key] for key in SPEC_FORM_FIELDS},
    # The rules of a section as a whole: the fsdp section's are about its sharding strategy
    # (hybrid_shard), the dpo section's between its own fields.
    "fsdp": FORM_LABELS["fsdp_sharding_strategy"],
    "dpo": spec_field("dpo").title,
}


# A spec location (`lora.r`, `columns.prompt`, `learning_rate`) -> the form field showing it.
_FORM_FIELD_AT = {**{key: key for key in FORM_LABELS},
                  **{spec_location(key): key for key in FORM_LABELS}}


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
