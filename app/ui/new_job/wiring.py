"""The New job tab's events, one named function a concern: each takes the form's components
(form_fields.NewJobForm) and calls the handlers, plain functions of plain values, turning
their answers into component updates."""
from __future__ import annotations

import gradio as gr

from app.auth.principal import principal_of
from app.ui.database_outage import answers_while_unreachable
from app.ui.new_job import (column_handlers, form_handlers, option_visibility,
                            preflight_handlers, target_handlers, upload_handlers)
from app.ui.new_job.form_fields import NewJobForm
from app.ui.new_job.form_handlers import form_values
from app.ui.new_job.form_layout import FORM_FIELDS, GRPO_AREAS, form_key
from app.ui.new_job.option_visibility import COLUMN_ROLES
from app.ui.new_job.plan_panel import PlanPanel, plan_updates
from app.ui.request_polling import RequestPolling, still_waiting
from app.views.input_suggestions import input_suggestions
from tunedeck.settings import Settings
from tunedeck.spec.fields import BACKEND_NAMES

COLUMN_KEYS = [form_key(f"columns.{role}") for role in COLUMN_ROLES]


def wire_preview(form: NewJobForm, preview, plan_panel: PlanPanel, *, database,
                 settings: Settings) -> None:
    """Every input's change (and the page's load) re-runs the preview. No triggers: so an
    opened form plans for the workers registered now (the first preview was made before any
    worker said what it has); one listener, so a load's preview never lands after an edit's."""
    infos = {key: form.fields[key].info for key in FORM_FIELDS}  # restored once fixed

    def shown_preview(request: gr.Request, *values):
        shown = form_handlers.preview_form(form_values(values), principal=principal_of(request),
                                           settings=settings, database=database)
        # Each bad field says why under itself, in the error colour; the rest of the preview
        # keeps the last valid form's spec, config, command and plan.
        marks = [gr.update(info=shown.field_errors.get(key, shown.field_infos.get(key,
                                                                           infos[key])),
                           elem_classes=["field-error"] if key in shown.field_errors else [])
                 for key in FORM_FIELDS]
        if not shown.valid:
            kept = [gr.skip()] * (len(preview.made_from_the_spec) + len(plan_panel.outputs))
            return (shown.message, f"#### {shown.config_title}", *kept, *marks)
        return (shown.message, f"#### {shown.config_title}", shown.spec_yaml, shown.config_json,
                shown.trainer_json, shown.command_line, *plan_updates(shown.plan), *marks)

    gr.on(None, shown_preview, form.inputs,
          [preview.message, preview.config_title, *preview.made_from_the_spec,
           *plan_panel.outputs, *form.inputs],
          show_progress="hidden", trigger_mode="always_last")


def wire_submit(form: NewJobForm, button: gr.Button, outputs: list, *, database, celery_app,
                settings: Settings):
    """Submit: the new job's id and the confirmation (or why not) into `outputs`; the event,
    for build_ui to chain "open the new job" onto."""
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

    return button.click(submit, form.inputs, outputs)


def wire_dataset(form: NewJobForm, *, database, settings: Settings) -> None:
    """An uploaded file fills the dataset field; a dataset's columns fill the pickers."""
    fields, groups = form.fields, form.groups

    def upload(received, request: gr.Request):
        answer = upload_handlers.upload_dataset_from_form(
            received, principal=principal_of(request), settings=settings, database=database)
        columns = [gr.skip() if answer.columns is None else answer.columns[role]
                   for role in COLUMN_ROLES]
        opened = gr.Accordion(open=True) if answer.show_columns else gr.skip()
        return (answer.dataset if answer.dataset is not None else gr.skip(), answer.message,
                None, *columns, opened)

    def offer_columns(dataset, split, objective, request: gr.Request):
        names, hint = column_handlers.dataset_column_choices(
            dataset, split, principal=principal_of(request), settings=settings)
        # Not the objective's usual columns: the pickers are opened, where the error points.
        opened = (gr.Accordion(open=True)
                  if column_handlers.columns_to_choose(names, objective=objective or "sft")
                  else gr.skip())
        return (*(gr.Dropdown(choices=column_handlers.column_choices(role, names))
                  for role in COLUMN_ROLES), hint, opened)

    columns = [fields[key] for key in COLUMN_KEYS]
    groups["upload_button"].upload(
        upload, groups["upload_button"],
        [fields["dataset"], groups["upload_message"], groups["upload_button"], *columns,
         groups["dataset_options"]], show_progress="minimal")
    gr.on([fields["dataset"].change, fields["dataset_split"].change], offer_columns,
          [fields["dataset"], fields["dataset_split"], fields["objective"]],
          [*columns, groups["columns_hint"], groups["dataset_options"]],
          show_progress="hidden", trigger_mode="always_last")


def wire_data_check(form: NewJobForm, data_check: RequestPolling, *, database, celery_app,
                    settings: Settings) -> None:
    """Check data asks a worker to read the data; the answer is polled until it is in."""
    result = form.groups["check_data_result"]

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

    # Mostly waiting on a worker: one user's check must not queue behind another's.
    form.groups["check_data"].click(check_data, [data_check.waiting, *form.inputs],
                                    [result, *data_check.outputs], concurrency_limit=None)
    data_check.on_tick(poll_data_check, [result])


def wire_suggestions(form: NewJobForm, *, database, settings: Settings) -> None:
    """The model and dataset suggestions: filled as either opens, a pick copied above."""
    suggestions = form.groups["suggestions"]

    def offer_suggestions(request: gr.Request):
        offered = input_suggestions(database=database, principal=principal_of(request),
                                    settings=settings)
        return gr.Dropdown(choices=offered.models), gr.Dropdown(choices=offered.datasets)

    for key, dropdown in suggestions.items():
        dropdown.focus(offer_suggestions, None, [suggestions["model"], suggestions["dataset"]],
                       show_progress="hidden")
        dropdown.input(lambda picked: picked or gr.skip(), dropdown, form.fields[key],
                       show_progress="hidden")


def wire_learning_rate(form: NewJobForm, loaded: gr.State) -> None:
    """A new model brings its kind's learning rate while the box holds the other kind's
    default (a rate the user typed stays, as does the one a preset's Load, `loaded`, set)."""
    fields = form.fields

    def learning_rate_for(model, learning_rate, loaded_now):
        wanted = form_handlers.learning_rate_for_model(model, learning_rate, loaded_now)
        return gr.skip() if wanted is None else wanted

    fields["model"].change(learning_rate_for,
                           [fields["model"], fields["learning_rate"], loaded],
                           fields["learning_rate"], show_progress="hidden")


def wire_option_groups(form: NewJobForm) -> None:
    """One options group a backend, named as it is (backend_options_visible's order); the
    LoRA options for adapter methods; the preference options and the objective's columns
    as the objective changes (a preset's Load too)."""
    fields, groups = form.fields, form.groups

    def backend_groups(backend: str):
        return tuple(gr.Group(visible=shown)
                     for shown in option_visibility.backend_options_visible(backend))

    def lora_group(method: str):
        return gr.Group(visible=option_visibility.lora_options_visible(method))

    rl_groups = [groups[area.replace(" ", "_")] for area in GRPO_AREAS]

    def objective_options(objective: str):
        dpo, grpo, *columns = option_visibility.objective_options_visible(objective)
        return (gr.Group(visible=dpo), *(gr.Group(visible=grpo) for _ in rl_groups),
                *(gr.Dropdown(visible=shown) for shown in columns))

    fields["backend"].change(backend_groups, fields["backend"],
                             [groups[name] for name in BACKEND_NAMES], show_progress="hidden")
    fields["method"].change(lora_group, fields["method"], groups["lora"], show_progress="hidden")
    fields["objective"].change(objective_options, fields["objective"],
                               [groups["dpo"], *rl_groups,
                                *(fields[key] for key in COLUMN_KEYS)],
                               show_progress="hidden")


def wire_objective_switch(form: NewJobForm) -> None:
    """A user's pick of an objective also swaps the built-in dataset for the objective's,
    turns off what DPO and GRPO refuse, and fits GRPO's batch and sequence to its groups
    (`.input`: a preset's Load sets what it saved instead)."""
    keys = ("dataset", "packing", "padding_free", "micro_batch_size", "seq_len")
    switched = [form.fields[key] for key in keys]
    read = [form.fields[key] for key in ("grad_accum", "grpo_num_generations",
                                         "grpo_max_completion_length")]

    def objective_picked(objective, dataset, packing, padding_free, micro_batch_size, seq_len,
                         grad_accum, generations, completion):
        switch = option_visibility.objective_picked(
            objective, dataset, packing, padding_free,
            form={"micro_batch_size": micro_batch_size, "seq_len": seq_len,
                  "grad_accum": grad_accum, "grpo_num_generations": generations,
                  "grpo_max_completion_length": completion})
        return tuple(gr.skip() if value is None else value
                     for value in (switch.dataset, switch.packing, switch.padding_free,
                                   switch.micro_batch_size, switch.seq_len))

    form.fields["objective"].input(objective_picked,
                                   [form.fields["objective"], *switched, *read],
                                   switched, show_progress="hidden")


def wire_lora_targets(form: NewJobForm, loaded: gr.State, *, settings: Settings) -> None:
    """What LoRA adapts: asked by its button, then kept fresh: an answer shown for one model
    must not stay beside another (or other expert options). The expert options show for a
    mixture of experts only; `loaded` is what a preset's Load just set, which they keep."""
    fields, answer = form.fields, form.groups["lora_targets"]

    def show_lora_targets(request: gr.Request, *values):
        return target_handlers.lora_targets_view(form_values(values),
                                                 principal=principal_of(request), settings=settings)

    def offer_expert_options(model, loaded_now, request: gr.Request):
        moe = target_handlers.model_has_experts(model, principal=principal_of(request),
                                                settings=settings)
        # A preset just loaded for this model set the boxes as it was saved.
        visible, experts, router = form_handlers.expert_options(
            moe, keep_value=loaded_now is not None and list(loaded_now)[0] == model)
        return tuple(gr.Checkbox(visible=visible, **({} if value is None else {"value": value}))
                     for value in (experts, router))

    def refresh_lora_targets(request: gr.Request, shown, *values):
        refreshed = target_handlers.refreshed_lora_targets(
            form_values(values), shown, principal=principal_of(request), settings=settings)
        return gr.skip() if refreshed is None else refreshed

    form.groups["lora_targets_button"].click(show_lora_targets, form.inputs, answer)
    fields["model"].change(offer_expert_options, [fields["model"], loaded],
                           [fields["lora_experts"], fields["lora_train_router"]],
                           show_progress="hidden", trigger_mode="always_last")
    gr.on([fields[key].change for key in ("model", "method", "lora_experts",
                                          "lora_train_router")],
          refresh_lora_targets, [answer, *form.inputs], answer,
          show_progress="hidden", trigger_mode="always_last")
