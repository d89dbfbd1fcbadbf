"""The New job form's LoRA answers: "What LoRA adapts" (the spec the form describes, resolved
on its model by the API's own action, app.actions.lora_preview, as Markdown), and whether
the model has experts for the expert options to apply to. The first is asked by a button and
kept fresh as the model changes, not on every keystroke before it was asked: the first answer
of a web process waits for the resolver's imports (seconds), later ones take milliseconds."""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.actions.errors import Invalid, Unavailable
from app.actions.lora_preview import ModelNotAdaptable, preview_lora_targets
from app.auth.principal import Principal
from app.auth.spec_access import model_access_problems
from app.ui.new_job.form_handlers import form_to_spec
from app.ui.new_job.option_visibility import lora_options_visible
from tunedeck.spec.job_spec import JobSpec
from tunedeck.lora_targets_text import preview_as_markdown
from tunedeck.planner.shape_source import has_experts
from tunedeck.settings import Settings

PICK_A_MODEL = "Pick a model to see what LoRA adapts on it."


def lora_targets_view(form: dict[str, Any], *, principal: Principal, settings: Settings) -> str:
    if not (form["model"] or "").strip():
        return PICK_A_MODEL
    spec, problems = form_to_spec(form)
    if spec is None:
        return "Fix the form first:\n" + "\n".join(f"- {line}" for line in problems.splitlines())
    if not lora_options_visible(spec.method):
        return "A full fine-tune trains every weight."
    try:
        preview = preview_lora_targets(principal, spec, settings=settings)
    except (ModelNotAdaptable, Unavailable) as error:
        return f"No answer: {error}. {PICK_A_MODEL}"
    except Invalid as refused:  # a model this user could not train: nothing was read
        return f"{refused}. {PICK_A_MODEL}"
    return preview_as_markdown(preview, dropout=spec.lora.dropout)


def refreshed_lora_targets(form: dict[str, Any], shown: str | None, *, principal: Principal,
                           settings: Settings) -> str | None:
    """The answer again for a changed form, once one is shown (None: none was asked for,
    nothing to refresh): an answer about the last model must not stay beside a new one."""
    if not shown:
        return None
    return lora_targets_view(form, principal=principal, settings=settings)


def model_has_experts(model: str | None, *, principal: Principal,
                      settings: Settings) -> bool | None:
    """Whether the form's model is a mixture of experts; None when that cannot be read,
    including a model this user may not name (nothing is read then)."""
    try:
        spec = JobSpec(model=(model or "").strip(), max_steps=1)
    except ValidationError:
        return None
    if model_access_problems(spec, principal=principal, settings=settings):
        return None
    return has_experts(spec.model)
