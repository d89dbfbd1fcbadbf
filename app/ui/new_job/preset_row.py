"""The New job form's presets row: pick a preset and Load it into the form, or name the
form and save it (app/ui/new_job/preset_handlers.py does the work)."""
from __future__ import annotations

from typing import Any

import gradio as gr

from app.auth.principal import principal_of
from app.ui.new_job import preset_handlers
from app.ui.new_job.form_handlers import form_values
from app.ui.new_job.form_layout import FORM_FIELDS


def preset_row() -> dict[str, Any]:
    """Presets: pick one and Load it into the form, or name the form and save it."""
    # Buttons at their own height, on the inputs' baseline (page_chrome's CSS): stretched to
    # the labelled inputs' height they read as two grey panels.
    with gr.Row(equal_height=False, elem_id="new-job-presets"):
        # Choices come from the principal's presets when the list is opened (the tab is
        # built once for everyone, before any request says who).
        picker = gr.Dropdown([], value=None, label="Preset", scale=3, min_width=160,
                             elem_id="new-job-preset")
        load = gr.Button("Load", size="md", scale=0, min_width=90,
                         elem_id="new-job-preset-load")
        name = gr.Textbox(label="Preset name", placeholder="name this form", max_length=80,
                          scale=3, min_width=160, elem_id="new-job-preset-name")
        save = gr.Button("Save as preset", size="md", scale=0, min_width=170,
                         elem_id="new-job-preset-save")
    message = gr.Markdown(elem_id="new-job-preset-result")
    return {"picker": picker, "load": load, "name": name, "save": save, "message": message}


def wire_presets(row: dict[str, Any], inputs: list, loaded: gr.State, *, database) -> None:
    """Save takes the form as Submit does; Load sets every field it has (the fields' change
    events then re-run the preview, as after the plan's Apply) and notes the model and
    rate it set in `loaded`, so the model's change keeps the preset's rate."""
    def refresh(request: gr.Request):
        try:
            names = preset_handlers.preset_names(principal=principal_of(request),
                                                 database=database)
        except PermissionError:
            return gr.skip()
        return gr.Dropdown(choices=names)

    def save(name, request: gr.Request, *values):
        try:
            principal = principal_of(request)
        except PermissionError:
            return gr.skip(), gr.skip(), "Not saved: sign in first."
        saved = preset_handlers.save_form_as_preset(form_values(values), name,
                                                    principal=principal, database=database)
        picked = gr.Dropdown(choices=saved.names,
                             **({"value": saved.saved} if saved.saved else {}))
        return picked, (saved.saved if saved.saved else gr.skip()), saved.message

    def load(name, request: gr.Request):
        try:
            principal = principal_of(request)
        except PermissionError:
            return (*[gr.skip()] * (len(inputs) + 2), "Not loaded: sign in first.")
        form, message = preset_handlers.load_preset_into_form(name, principal=principal,
                                                              database=database)
        if form is None:
            return (*[gr.skip()] * (len(inputs) + 2), message)
        values = [form[field] if field in form else gr.skip() for field in FORM_FIELDS]
        return (*values, [form["model"], form["learning_rate"]], name, message)

    row["picker"].focus(refresh, None, row["picker"], show_progress="hidden")
    row["save"].click(save, [row["name"], *inputs], [row["picker"], row["name"], row["message"]],
                      show_progress="hidden")
    row["load"].click(load, row["picker"], [*inputs, loaded, row["name"], row["message"]],
                      show_progress="hidden")
