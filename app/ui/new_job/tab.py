"""The "New job" tab: the form (form_fields, from the layout table), its live preview, the
memory plan and Submit, laid out here and wired by wiring.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.new_job import form_handlers, wiring
from app.ui.new_job.form_fields import build_form
from app.ui.new_job.form_handlers import FormPreview
from app.ui.new_job.plan_panel import build_plan_panel, wire_apply_buttons
from app.ui.new_job.preset_row import preset_row, wire_presets
from app.ui.request_polling import build_request_polling
from tunedeck.settings import Settings


@dataclass(frozen=True)
class NewJobTab:
    submitted: Any  # the Submit click's event, for build_ui to chain "open the new job" onto
    submitted_job_id: gr.State
    model: gr.Textbox  # set by the job page's "Continue from this job" (job:ID)


@dataclass(frozen=True)
class PreviewColumn:
    """The boxes beside the form: what is wrong, then the spec and what is made from it."""

    message: gr.Markdown
    spec: gr.Code
    config_title: gr.Markdown
    config: gr.Code
    trainer: gr.Code
    command_line: gr.Textbox

    @property
    def made_from_the_spec(self) -> list:
        """The boxes a valid form fills and a bad one leaves as they were."""
        return [self.spec, self.config, self.trainer, self.command_line]


def build_new_job_tab(*, database, celery_app, settings: Settings) -> NewJobTab:
    defaults = form_handlers.default_form()
    # The defaults name the built-in model, so nothing local is read: the first preview is
    # the same whoever opens the page, before any request says who.
    initial = form_handlers.preview_form(defaults, principal=OPEN_PRINCIPAL, settings=settings)
    gr.Markdown("Describe a fine-tune. The preview beside the form is exactly the spec, config "
                "and command the worker will write and run.")
    with gr.Row():
        with gr.Column(scale=3):
            presets = preset_row()
            form = build_form(defaults)
            submit_button = gr.Button("Submit job", variant="primary", elem_id="new-job-submit")
            submit_message = gr.Markdown(elem_id="new-job-result")
        with gr.Column(scale=2):
            preview = build_preview_column(initial)
    plan_panel = build_plan_panel(initial.plan)
    submitted_job_id = gr.State(None)
    loaded_from_preset = gr.State(None)  # [model, learning rate] the last Load set
    # In the order the tab has always wired them (the browser sends one trigger's events in
    # that order): the model's change asks for its learning rate before the preview.
    wiring.wire_suggestions(form, database=database, settings=settings)
    wiring.wire_learning_rate(form, loaded_from_preset)
    wiring.wire_dataset(form, database=database, settings=settings)
    wiring.wire_preview(form, preview, plan_panel, database=database, settings=settings)
    wire_apply_buttons(plan_panel, form.inputs)
    # A data check still running: polled, and the next click on an unchanged form waits on it.
    wiring.wire_data_check(form, build_request_polling(), database=database,
                           celery_app=celery_app, settings=settings)
    wiring.wire_option_groups(form)
    wiring.wire_objective_switch(form)
    wiring.wire_lora_targets(form, loaded_from_preset, settings=settings)
    submitted = wiring.wire_submit(form, submit_button, [submitted_job_id, submit_message],
                                   database=database, celery_app=celery_app, settings=settings)
    wire_presets(presets, form.inputs, loaded_from_preset, database=database)
    return NewJobTab(submitted=submitted, submitted_job_id=submitted_job_id,
                     model=form.fields["model"])


def build_preview_column(initial: FormPreview) -> PreviewColumn:
    message = gr.Markdown(initial.message, elem_id="new-job-errors")
    # The spec first: the rest is made from it, and it is what a script or the CLI submits.
    spec = gr.Code(initial.spec_yaml, language="yaml",
                   label="Job spec: the YAML for tunedeck submit (fields at their defaults "
                         "left out)",
                   lines=6, max_lines=30, interactive=False, elem_id="new-job-spec")
    config_title = gr.Markdown(f"#### {initial.config_title}", elem_id="new-job-config-title")
    config = gr.Code(initial.config_json, language="json", label="Backend config", lines=12,
                     max_lines=40, interactive=False, elem_id="new-job-config")
    trainer = gr.Code(initial.trainer_json, language="json", label="Trainer settings", lines=8,
                      max_lines=30, interactive=False, elem_id="new-job-trainer-settings")
    command_line = gr.Textbox(initial.command_line, lines=2, max_lines=40,
                              label="Launch command (torchrun; on a Slurm queue, the sbatch "
                                    "script)",
                              interactive=False, elem_id="new-job-command")
    return PreviewColumn(message, spec, config_title, config, trainer, command_line)
