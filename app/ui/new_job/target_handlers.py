"""The New job form's "What LoRA adapts" answer: the spec the form describes, resolved on its
model by the API's own action (app.actions.lora_preview), as Markdown. Asked by a button,
not on every keystroke: the first answer of a web process waits for the resolver's imports
(seconds), later ones take milliseconds."""
from __future__ import annotations

from typing import Any

from app.actions.errors import Invalid, Unavailable
from app.actions.lora_preview import ModelNotAdaptable, preview_lora_targets
from app.auth.principal import Principal
from app.ui.new_job.form_handlers import form_to_spec, lora_options_visible
from tunedeck.lora_targets_text import preview_as_markdown
from tunedeck.settings import Settings


def lora_targets_view(form: dict[str, Any], *, principal: Principal, settings: Settings) -> str:
    spec, problems = form_to_spec(form)
    if spec is None:
        return "Fix the form first:\n" + "\n".join(f"- {line}" for line in problems.splitlines())
    if not lora_options_visible(spec.method):
        return "A full fine-tune trains every weight."
    try:
        preview = preview_lora_targets(principal, spec, settings=settings)
    except (ModelNotAdaptable, Unavailable) as error:
        return f"No answer: {error}"
    except Invalid as refused:  # a model this user could not train: nothing was read
        return str(refused)
    return preview_as_markdown(preview, dropout=spec.lora.dropout)
