"""The New job form's small field builders: one Gradio component per form field, by name."""
from __future__ import annotations

from typing import Any

import gradio as gr

from app.ui.new_job import form_handlers
from app.ui.new_job.form_labels import FORM_LABELS as LABELS


def _dtype(name: str, defaults: dict[str, Any], choices: list[str],
           info: str | None = None) -> gr.Dropdown:
    return gr.Dropdown(choices, value=defaults[name], label=LABELS[name], info=info,
                       elem_id=f"new-job-{name.replace('_', '-')}")


def _integer(name: str, defaults: dict[str, Any], info: str | None = None) -> gr.Number:
    return gr.Number(defaults[name], label=LABELS[name], info=info, precision=0,
                     elem_id=f"new-job-{name.replace('_', '-')}")


def _checkbox(name: str, defaults: dict[str, Any]) -> gr.Checkbox:
    return gr.Checkbox(defaults[name], label=LABELS[name],
                       elem_id=f"new-job-{name.replace('_', '-')}")


def _backend_groups(backend: str):
    zero2_visible, fsdp_visible = form_handlers.backend_options_visible(backend)
    return gr.Group(visible=zero2_visible), gr.Group(visible=fsdp_visible)


def _lora_group(method: str):
    return gr.Group(visible=form_handlers.lora_options_visible(method))
