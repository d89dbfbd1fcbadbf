"""The "New job" tab: the form, its live preview, and Submit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.auth.principal import OPEN_PRINCIPAL, principal_of
from app.ui.new_job import (column_handlers, form_handlers, option_visibility,
                            preflight_handlers, target_handlers, upload_handlers)
from app.ui.database_outage import answers_while_unreachable
from app.ui.new_job.form_handlers import form_values
from app.ui.new_job.form_labels import COLUMN_ROLES, FORM_FIELDS
from app.ui.request_polling import build_request_polling, still_waiting
from app.ui.new_job.form_fields import (_backend_groups, _lora_group, _objective_options,
                                       form_fields)
from app.ui.new_job.preset_row import preset_row, wire_presets
from app.ui.new_job.plan_panel import build_plan_panel, plan_updates, wire_apply_buttons
from app.views.input_suggestions import input_suggestions
from tunedeck.spec.fields import BACKEND_NAMES
from tunedeck.settings import Settings


@dataclass(frozen=True)
class NewJobTab:
    submitted: Any  # the Submit click's event, for build_ui to chain "open the new job" onto
    submitted_job_id: gr.State


def build_new_job_tab(*, database, celery_app, settings: Settings) -> NewJobTab:
    defaults = form_handlers.default_form()
    # The defaults name the built-in model, so nothing local is read: the first preview is
    # the same whoever opens the page, before any request says who.
    initial = form_handlers.preview_form(defaults, principal=OPEN_PRINCIPAL, settings=settings)
    gr.Markdown("Describe a fine-tune. The preview beside the form is exactly the config and "
                "command the worker will write and run.")
    with gr.Row():
        with gr.Column(scale=3):
            presets = preset_row()
            fields, groups = form_fields(defaults)
            upload_button, upload_message = groups["upload_button"], groups["upload_message"]
            submit_button = gr.Button("Submit job", variant="primary", elem_id="new-job-submit")
            submit_message = gr.Markdown(elem_id="new-job-result")
        with gr.Column(scale=2):
            form_message = gr.Markdown(initial.message, elem_id="new-job-errors")
            config_title = gr.Markdown(f"#### {initial.config_title}",
                                       elem_id="new-job-config-title")
            config_code = gr.Code(initial.config_json, language="json", label="Backend config",
                                  lines=12, max_lines=40, interactive=False,
                                  elem_id="new-job-config")
            trainer_code = gr.Code(initial.trainer_json, language="json", label="Trainer settings",
                                   lines=8, max_lines=30, interactive=False,
                                   elem_id="new-job-trainer-settings")
            command_line = gr.Textbox(initial.command_line, lines=2, max_lines=40,
                                      label="Launch command (torchrun; on a Slurm queue, "
                                            "the sbatch script)",
                                      interactive=False, elem_id="new-job-command")
    plan_panel = build_plan_panel(initial.plan)
    submitted_job_id = gr.State(None)
    # A data check still running: polled, and the next click on an unchanged form waits on it.
    data_check = build_request_polling()
    inputs = [fields[name] for name in FORM_FIELDS]
    infos = {name: fields[name].info for name in FORM_FIELDS}  # restored once a field is fixed

    def preview(request: gr.Request, *values):
        shown = form_handlers.preview_form(form_values(values), principal=principal_of(request),
                                           settings=settings, database=database)
        # Each bad field says why under itself, in the error colour; the rest of the preview
        # keeps the last valid form's config, command and plan.
        marks = [gr.update(info=shown.field_errors.get(name, shown.field_infos.get(name,
                                                                            infos[name])),
                           elem_classes=["field-error"] if name in shown.field_errors else [])
                 for name in FORM_FIELDS]
        if not shown.valid:
            kept = [gr.skip()] * (3 + len(plan_panel.outputs))
            return (f"#### {shown.config_title}", *kept[:3], shown.message, *kept[3:], *marks)
        return (f"#### {shown.config_title}", shown.config_json, shown.trainer_json,
                shown.command_line, shown.message, *plan_updates(shown.plan), *marks)

    # No job id while the database is unreachable, so build_ui's "open the new job" opens
    # none (not the one submitted before); nor the last submit's confirmation, now untrue.
    @answers_while_unreachable(lambda: (None, ""))
    def submit(request: gr.Request, *values):
        try:
            principal = principal_of(request)
        except PermissionError:
            return None, "Not submitted: sign in first."
        return form_handlers.submit_form(form_values(values), database=database,
                                         celery_app=celery_app, principal=principal,
                                         settings=settings)

    def upload(received, request: gr.Request):
        answer = upload_handlers.upload_dataset_from_form(
            received, principal=principal_of(request), settings=settings, database=database)
        columns = [gr.skip() if answer.columns is None else answer.columns[role]
                   for role in COLUMN_ROLES]
        opened = gr.Accordion(open=True) if answer.show_columns else gr.skip()
        return (answer.dataset if answer.dataset is not None else gr.skip(), answer.message,
                None, *columns, opened)

    def check_data(request: gr.Request, pending, *values):
        try:
            principal = principal_of(request)
        except PermissionError:
            return "Not checked: sign in first.", *still_waiting(None)
        shown, still_running = preflight_handlers.check_form_data(
            form_values(values), pending, database=database, celery_app=celery_app,
            settings=settings, principal=principal)
        return shown, *still_waiting(still_running)

    def poll_data_check(pending, request: gr.Request):
        shown, still_running = preflight_handlers.poll_data_check(
            pending, database=database, settings=settings, principal=principal_of(request))
        return shown, *still_waiting(still_running)

    def offer_columns(dataset, split, objective, request: gr.Request):
        names, hint = column_handlers.dataset_column_choices(
            dataset, split, principal=principal_of(request), settings=settings)
        # Not the objective's usual columns: the pickers are opened, where the error points.
        opened = (gr.Accordion(open=True)
                  if column_handlers.columns_to_choose(names, objective=objective or "sft")
                  else gr.skip())
        return (*(gr.Dropdown(choices=column_handlers.column_choices(role, names))
                  for role in COLUMN_ROLES), hint, opened)

    def learning_rate_for(model, learning_rate, loaded):
        wanted = form_handlers.learning_rate_for_model(model, learning_rate, loaded)
        return gr.skip() if wanted is None else wanted

    def offer_suggestions(request: gr.Request):
        offered = input_suggestions(database=database, principal=principal_of(request),
                                    settings=settings)
        return gr.Dropdown(choices=offered.models), gr.Dropdown(choices=offered.datasets)

    suggestions = groups["suggestions"]
    for name, dropdown in suggestions.items():
        dropdown.focus(offer_suggestions, None, [suggestions["model"], suggestions["dataset"]],
                       show_progress="hidden")
        dropdown.input(lambda picked: picked or gr.skip(), dropdown, fields[name],
                       show_progress="hidden")
    loaded_from_preset = gr.State(None)  # [model, learning rate] the last Load set
    fields["model"].change(learning_rate_for,
                           [fields["model"], fields["learning_rate"], loaded_from_preset],
                           fields["learning_rate"], show_progress="hidden")
    upload_button.upload(upload, upload_button,
                         [fields["dataset"], upload_message, upload_button,
                          *(fields[f"columns_{role}"] for role in COLUMN_ROLES),
                          groups["dataset_options"]],
                         show_progress="minimal")
    gr.on([fields["dataset"].change, fields["dataset_split"].change], offer_columns,
          [fields["dataset"], fields["dataset_split"], fields["objective"]],
          [*(fields[f"columns_{role}"] for role in COLUMN_ROLES), groups["columns_hint"],
           groups["dataset_options"]],
          show_progress="hidden", trigger_mode="always_last")
    # No triggers: every input's change and the page's load, so an opened form plans for
    # the workers registered now (the first preview was made before any worker said what it
    # has); one listener, so a load's preview never lands after an edit's.
    gr.on(None, preview, inputs,
          [config_title, config_code, trainer_code, command_line, form_message,
           *plan_panel.outputs, *inputs],
          show_progress="hidden",
          trigger_mode="always_last")
    wire_apply_buttons(plan_panel, inputs)
    # Mostly waiting on a worker: one user's check must not queue behind another's.
    groups["check_data"].click(check_data, [data_check.waiting, *inputs],
                               [groups["check_data_result"], *data_check.outputs],
                               concurrency_limit=None)
    data_check.on_tick(poll_data_check, [groups["check_data_result"]])
    # One options group a backend, named as it is (backend_options_visible's order).
    fields["backend"].change(_backend_groups, fields["backend"],
                             [groups[name] for name in BACKEND_NAMES], show_progress="hidden")
    fields["method"].change(_lora_group, fields["method"], groups["lora"], show_progress="hidden")
    # The objective shows its settings and its columns as it changes (a preset's Load too);
    # a user's pick also swaps the built-in dataset for the objective's and turns off what
    # DPO refuses.
    fields["objective"].change(_objective_options, fields["objective"],
                               [groups["dpo"], *(fields[f"columns_{role}"]
                                                 for role in COLUMN_ROLES)],
                               show_progress="hidden")

    def objective_picked(objective, dataset, packing, padding_free):
        switch = option_visibility.objective_picked(objective, dataset, packing, padding_free)
        return tuple(gr.skip() if value is None else value
                     for value in (switch.dataset, switch.packing, switch.padding_free))

    objective_switched = [fields[name] for name in ("dataset", "packing", "padding_free")]
    fields["objective"].input(objective_picked, [fields["objective"], *objective_switched],
                              objective_switched, show_progress="hidden")

    def show_lora_targets(request: gr.Request, *values):
        return target_handlers.lora_targets_view(form_values(values),
                                                 principal=principal_of(request), settings=settings)

    def refresh_lora_targets(request: gr.Request, shown, *values):
        answer = target_handlers.refreshed_lora_targets(
            form_values(values), shown, principal=principal_of(request), settings=settings)
        return gr.skip() if answer is None else answer

    def offer_expert_options(model, loaded, request: gr.Request):
        moe = target_handlers.model_has_experts(model, principal=principal_of(request),
                                                settings=settings)
        # A preset just loaded for this model set the boxes as it was saved.
        visible, experts, router = form_handlers.expert_options(
            moe, keep_value=loaded is not None and list(loaded)[0] == model)
        return tuple(gr.Checkbox(visible=visible, **({} if value is None else {"value": value}))
                     for value in (experts, router))

    groups["lora_targets_button"].click(show_lora_targets, inputs, groups["lora_targets"])
    fields["model"].change(offer_expert_options, [fields["model"], loaded_from_preset],
                           [fields["lora_experts"], fields["lora_train_router"]],
                           show_progress="hidden", trigger_mode="always_last")
    # An answer shown for one model must not stay beside another (or other expert options).
    gr.on([fields[name].change for name in ("model", "method", "lora_experts",
                                            "lora_train_router")],
          refresh_lora_targets, [groups["lora_targets"], *inputs], groups["lora_targets"],
          show_progress="hidden", trigger_mode="always_last")
    submitted = submit_button.click(submit, inputs, [submitted_job_id, submit_message])
    wire_presets(presets, inputs, loaded_from_preset, database=database)
    return NewJobTab(submitted=submitted, submitted_job_id=submitted_job_id)
