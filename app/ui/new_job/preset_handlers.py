"""The New job form's presets: save the form as a named preset, load one back into it.

Plain values in and out; app/actions/presets.py decides what a principal may do. Save
builds the spec exactly as Submit does (form_to_spec); Load fills the form through
spec_to_form, the inverse the form's defaults are made with too."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from app.actions import presets
from app.actions.errors import ActionError
from app.auth.principal import Principal
from app.ui.new_job.form_handlers import form_to_spec, spec_to_form
from app.ui.new_job.form_labels import problem_fields
from tunedeck.db.models import StoredSpecInvalid
from tunedeck.spec.job_spec import JobSpec


@dataclass(frozen=True)
class PresetSaved:
    message: str
    names: list[str]  # the principal's presets now, for the dropdown
    saved: str | None = None  # the saved preset's name (None: nothing saved)


def preset_names(*, principal: Principal, database) -> list[str]:
    return [preset.name for preset in presets.list_presets(principal, database=database)]


def save_form_as_preset(form: dict[str, Any], name: str, *, principal: Principal,
                        database) -> PresetSaved:
    """Saves the form's spec as `name` (overwriting the principal's same-named preset), or
    says why not; a form with errors saves nothing."""
    spec, problems = form_to_spec(form)
    if spec is None:  # each problem is shown beside its field already
        return PresetSaved(_error("Not saved: fix what is marked in red "
                                  f"({', '.join(problem_fields(problems))})."),
                           preset_names(principal=principal, database=database))
    try:
        preset, created = presets.save_preset(principal, name, spec, database=database)
    except ActionError as refused:
        return PresetSaved(_error(f"Not saved. {refused}"),
                           preset_names(principal=principal, database=database))
    verb = "Saved" if created else "Replaced"
    return PresetSaved(f"{verb} preset **{html.escape(preset.name)}**.",
                       preset_names(principal=principal, database=database), preset.name)


def load_preset_into_form(name: str | None, *, principal: Principal,
                          database) -> tuple[dict[str, Any] | None, str]:
    """(the form's new values, a message) or (None, why nothing was loaded). The values
    cover every field but gpu_memory_gb (the planner's, not the spec's)."""
    if not (name or "").strip():
        return None, _error("Not loaded: pick a preset first.")
    try:
        spec = presets.load_preset(principal, name, database=database).spec_model
    except (ActionError, StoredSpecInvalid) as refused:
        return None, _error(f"Not loaded: {refused}")
    message = f"Loaded preset **{html.escape(name.strip())}**."
    lacking = fields_the_form_lacks(spec)
    if lacking:  # a preset saved through the API may set what the form cannot show
        message += (" The form has no field for " + ", ".join(f"`{key}`" for key in lacking)
                    + ": submitting leaves it at its default.")
    return spec_to_form(spec), message


def fields_the_form_lacks(spec: JobSpec) -> list[str]:
    """The spec's settings the form cannot carry: those the form's own round trip changes
    (e.g. num_nodes, queue), as dotted keys."""
    carried, _problems = form_to_spec(spec_to_form(spec))
    if carried is None:
        return ["spec"]
    return _differences(spec.model_dump(mode="json"), carried.model_dump(mode="json"))


def _differences(wanted: dict, got: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in wanted.items():
        if isinstance(value, dict) and isinstance(got.get(key), dict):
            keys += _differences(value, got[key], f"{prefix}{key}.")
        elif got.get(key) != value:
            keys.append(f"{prefix}{key}")
    return keys


def _error(text: str) -> str:
    return f'<div class="field-error">{html.escape(text)}</div>'
