"""The New job form's "What LoRA adapts" answer: the spec the form describes, resolved on its
model by the trainer's own rule (app.actions.lora_preview), as Markdown. Asked by a button, not on
every keystroke: the first answer of a web process waits for the resolver's imports
(seconds), later ones take milliseconds."""
from __future__ import annotations

from typing import Any

from app.actions.lora_preview import PreviewUnavailable, lora_targets_preview
from tunedeck.lora_targets_text import preview_as_markdown
from app.auth.principal import Principal
from app.auth.spec_access import spec_access_problems
from app.ui.form_handlers import form_to_spec, lora_options_visible
from tunedeck.settings import Settings


def lora_targets_view(form: dict[str, Any], *, principal: Principal, settings: Settings) -> str:
    spec, problems = form_to_spec(form)
    if spec is None:
        return "Fix the form first:\n" + "\n".join(f"- {line}" for line in problems.splitlines())
    if not lora_options_visible(spec.method):
        return "A full fine-tune trains every weight."
    # The resolver reads the model's config.json: only where a job of this user could.
    refused = [message for field, message in spec_access_problems(
        spec, principal=principal, settings=settings) if field == "model"]
    if refused:
        return "\n".join(refused)
    try:
        preview = lora_targets_preview(spec, home=settings.home_dir)
    except (PreviewUnavailable, ValueError) as error:
        return f"No answer: {error}"
    return preview_as_markdown(preview, dropout=spec.lora.dropout)
