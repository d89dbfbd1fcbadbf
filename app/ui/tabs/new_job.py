"""The "New job" tab: the form, its live preview, and Submit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.auth.principal import OPEN_PRINCIPAL, principal_of
from app.ui.new_job import (column_handlers, form_handlers, preflight_handlers, preset_handlers,
                            target_handlers, upload_handlers)
from app.ui.new_job.form_handlers import SAME_AS_PRECISION, form_values
from app.ui.new_job.form_labels import COLUMN_ROLES, FORM_FIELDS, FORM_LABELS as LABELS
from app.ui.tabs.new_job_fields import _backend_groups, _checkbox, _dtype, _integer, _lora_group
from app.ui.tabs.plan_panel import build_plan_panel, plan_updates, wire_apply_buttons
from app.views.input_suggestions import input_suggestions
from tunedeck.job_spec import (BACKENDS, DTYPES, EXPORT_DTYPES, LEARNING_RATE_SCHEDULES, METHODS,
                               PRECISIONS, SHARDING_STRATEGIES)
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
            preset_row = _preset_row()
            fields, groups = _form_fields(defaults)
            upload_button = gr.UploadButton(
                "Upload a dataset (.jsonl or .json)", file_types=[".jsonl", ".json"],
                type="filepath", size="sm", elem_id="new-job-dataset-upload")
            upload_message = gr.Markdown(elem_id="new-job-upload-result")
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
            command_line = gr.Textbox(initial.command_line, label="torchrun command", lines=2,
                                      interactive=False, elem_id="new-job-command")
    plan_panel = build_plan_panel(initial.plan)
    submitted_job_id = gr.State(None)
    preflight_pending = gr.State(None)  # a data check still running: the next click waits on it
    inputs = [fields[name] for name in FORM_FIELDS]
    infos = {name: fields[name].info for name in FORM_FIELDS}  # restored once a field is fixed

    def preview(request: gr.Request, *values):
        shown = form_handlers.preview_form(form_values(values), principal=principal_of(request),
                                           settings=settings, database=database)
        # Each bad field says why under itself, in the error colour; the rest of the preview
        # keeps the last valid form's config, command and plan.
        marks = [gr.update(info=shown.field_errors.get(name, infos[name]),
                           elem_classes=["field-error"] if name in shown.field_errors else [])
                 for name in FORM_FIELDS]
        if not shown.valid:
            kept = [gr.skip()] * (3 + len(plan_panel.outputs))
            return (f"#### {shown.config_title}", *kept[:3], shown.message, *kept[3:], *marks)
        return (f"#### {shown.config_title}", shown.config_json, shown.trainer_json,
                shown.command_line, shown.message, *plan_updates(shown.plan), *marks)

    def submit(request: gr.Request, *values):
        try:
            principal = principal_of(request)
        except PermissionError:
            return None, "Not submitted: sign in first."
        return form_handlers.submit_form(form_values(values), database=database,
                                         celery_app=celery_app, principal=principal,
                                         settings=settings)

    def upload(received, request: gr.Request):
        dataset, message = upload_handlers.upload_dataset_from_form(
            received, principal=principal_of(request), settings=settings, database=database)
        return (dataset if dataset is not None else gr.skip()), message, None

    def check_data(request: gr.Request, pending, *values):
        try:
            principal = principal_of(request)
        except PermissionError:
            return "Not checked: sign in first.", None
        return preflight_handlers.check_form_data(
            form_values(values), pending, database=database, celery_app=celery_app,
            settings=settings, principal=principal)

    def offer_columns(dataset, split, request: gr.Request):
        names, hint = column_handlers.dataset_column_choices(
            dataset, split, principal=principal_of(request), settings=settings)
        return (*(gr.Dropdown(choices=["", *names]) for _ in COLUMN_ROLES), hint)

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
    upload_button.upload(upload, upload_button, [fields["dataset"], upload_message, upload_button],
                         show_progress="minimal")
    gr.on([fields["dataset"].change, fields["dataset_split"].change], offer_columns,
          [fields["dataset"], fields["dataset_split"]],
          [*(fields[f"columns_{role}"] for role in COLUMN_ROLES), groups["columns_hint"]],
          show_progress="hidden", trigger_mode="always_last")
    gr.on([component.change for component in inputs], preview, inputs,
          [config_title, config_code, trainer_code, command_line, form_message,
           *plan_panel.outputs, *inputs],
          show_progress="hidden",
          trigger_mode="always_last")
    wire_apply_buttons(plan_panel, inputs)
    # Mostly waiting on a worker: one user's check must not queue behind another's.
    groups["check_data"].click(check_data, [preflight_pending, *inputs],
                               [groups["check_data_result"], preflight_pending],
                               concurrency_limit=None)
    fields["backend"].change(_backend_groups, fields["backend"], [groups["zero2"], groups["fsdp"]],
                             show_progress="hidden")
    fields["method"].change(_lora_group, fields["method"], groups["lora"], show_progress="hidden")
    def show_lora_targets(request: gr.Request, *values):
        return target_handlers.lora_targets_view(form_values(values),
                                                 principal=principal_of(request), settings=settings)

    groups["lora_targets_button"].click(show_lora_targets, inputs, groups["lora_targets"])
    submitted = submit_button.click(submit, inputs, [submitted_job_id, submit_message])
    _wire_presets(preset_row, inputs, loaded_from_preset, database=database)
    return NewJobTab(submitted=submitted, submitted_job_id=submitted_job_id)


def _preset_row() -> dict[str, Any]:
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


def _wire_presets(row: dict[str, Any], inputs: list, loaded: gr.State, *, database) -> None:
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


def _form_fields(defaults: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The form's inputs by FORM_FIELDS name, and the option groups shown per choice (and
    the column pickers' hint, "columns_hint"; the data check's button and panel)."""
    fields: dict[str, Any] = {}
    with gr.Row():
        fields["model"] = gr.Textbox(defaults["model"], label=LABELS["model"],
                                     info="local folder, Hugging Face id or builtin:tiny-llama",
                                     elem_id="new-job-model")
        fields["dataset"] = gr.Textbox(defaults["dataset"], label=LABELS["dataset"],
                                       info="local .jsonl/.json/.jsonl.gz/.parquet/.csv file, "
                                            "save_to_disk folder, Hugging Face id (org/name) "
                                            "or builtin:arithmetic",
                                       elem_id="new-job-dataset")
    # Filled when opened (the user's own recent values, what the allowed folders hold); a
    # pick is copied into the field above, which stays free text.
    suggestions: dict[str, gr.Dropdown] = {}
    with gr.Row():
        for name, label in (("model", "Recent and available models"),
                            ("dataset", "Recent, uploaded and available datasets")):
            suggestions[name] = gr.Dropdown(
                [], value=None, label=label, info="pick one to fill the field above",
                elem_id=f"new-job-{name}-suggestions")
    dataset_options = _dataset_options(fields, defaults)
    with gr.Row():
        check_data = gr.Button("Check data", size="sm", elem_id="new-job-check-data")
    check_data_result = gr.HTML(elem_id="new-job-check-data-result")
    dataset_options.update(check_data=check_data, check_data_result=check_data_result,
                           suggestions=suggestions)
    fields["name"] = gr.Textbox(defaults["name"], label=LABELS["name"], placeholder="optional",
                                elem_id="new-job-name")
    with gr.Row():
        fields["method"] = gr.Radio(list(METHODS), value=defaults["method"],
                                    label=LABELS["method"], elem_id="new-job-method")
        fields["backend"] = gr.Radio(list(BACKENDS), value=defaults["backend"],
                                     label=LABELS["backend"], elem_id="new-job-backend")
        fields["precision"] = gr.Radio(list(PRECISIONS), value=defaults["precision"],
                                       label=LABELS["precision"], elem_id="new-job-precision")
    with gr.Row():
        fields["num_gpus"] = _integer("num_gpus", defaults, info="ranks on this host")
        fields["gpu_memory_gb"] = gr.Number(defaults["gpu_memory_gb"], label=LABELS["gpu_memory_gb"],
                                            info="for the memory plan", elem_id="new-job-gpu-memory-gb")
        fields["max_steps"] = _integer("max_steps", defaults, info="or leave empty and set epochs")
        # A text box: Gradio draws an empty number box as 0, and 0 epochs is not "unset".
        fields["epochs"] = gr.Textbox(defaults["epochs"], label=LABELS["epochs"],
                                      info="passes over the data, instead of steps",
                                      placeholder="empty: the steps say", elem_id="new-job-epochs")
        fields["learning_rate"] = gr.Number(defaults["learning_rate"],
                                            label=LABELS["learning_rate"], step=1e-5,
                                            info="2e-4 suits LoRA on real models, 5e-3 the "
                                                 "tiny built-in one (set as the model changes)",
                                            elem_id="new-job-learning-rate")
    with gr.Row():
        fields["micro_batch_size"] = _integer("micro_batch_size", defaults)
        fields["grad_accum"] = _integer("grad_accum", defaults)
        fields["seq_len"] = _integer("seq_len", defaults)
    with gr.Row():
        fields["lr_schedule"] = gr.Dropdown(list(LEARNING_RATE_SCHEDULES),
                                            value=defaults["lr_schedule"],
                                            label=LABELS["lr_schedule"],
                                            info="after warmup; decays to 10% of the peak",
                                            elem_id="new-job-lr-schedule")
        fields["warmup_steps"] = _integer("warmup_steps", defaults)
        fields["weight_decay"] = gr.Number(defaults["weight_decay"], step=0.01,
                                           label=LABELS["weight_decay"],
                                           elem_id="new-job-weight-decay")
        fields["max_grad_norm"] = gr.Number(defaults["max_grad_norm"], step=0.1,
                                            label=LABELS["max_grad_norm"], info="0: no clipping",
                                            elem_id="new-job-max-grad-norm")
    with gr.Accordion("Evaluation, packing, checkpoints and export", open=False,
                      elem_id="new-job-more-options"):
        with gr.Row():
            fields["eval_split"] = gr.Number(defaults["eval_split"], label=LABELS["eval_split"],
                                             step=0.05, info="fraction held out (0: none)",
                                             elem_id="new-job-eval-split")
            fields["eval_dataset"] = gr.Textbox(defaults["eval_dataset"],
                                                label=LABELS["eval_dataset"],
                                                placeholder="or a separate dataset",
                                                elem_id="new-job-eval-dataset")
            fields["eval_dataset_split"] = gr.Textbox(
                defaults["eval_dataset_split"], label=LABELS["eval_dataset_split"],
                info="when it is a Hugging Face id or a folder", elem_id="new-job-eval-dataset-split")
            fields["eval_every_steps"] = _integer("eval_every_steps", defaults,
                                                  info="0: only at the end")
        with gr.Row():
            fields["checkpoint_every_steps"] = _integer("checkpoint_every_steps", defaults,
                                                        info="0: none; needed to Resume")
            fields["keep_checkpoints"] = _integer("keep_checkpoints", defaults, info="newest kept")
            fields["seed"] = _integer("seed", defaults, info="data order, init and dropout")
            fields["packing"] = _checkbox("packing", defaults)
        with gr.Row():
            fields["export_dtype"] = _dtype("export_dtype", defaults, list(EXPORT_DTYPES),
                                            info="auto: the base model's stored dtype")
    groups = {**dataset_options, **_option_groups(fields, defaults)}
    return fields, groups


def _dataset_options(fields: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A Hugging Face id's config and split, and the column pickers (choices: the dataset's
    columns where the web can read them cheaply; any name can be typed)."""
    with gr.Accordion("Dataset config, split and columns", open=False,
                      elem_id="new-job-dataset-options"):
        with gr.Row():
            fields["dataset_config"] = gr.Textbox(defaults["dataset_config"],
                                                  label=LABELS["dataset_config"],
                                                  placeholder="a Hugging Face id's, optional",
                                                  elem_id="new-job-dataset-config")
            fields["dataset_split"] = gr.Textbox(defaults["dataset_split"],
                                                 label=LABELS["dataset_split"],
                                                 info="e.g. train or train[:10%]; a file is read whole",
                                                 elem_id="new-job-dataset-split")
        with gr.Row():
            for role in COLUMN_ROLES:
                name = f"columns_{role}"
                fields[name] = gr.Dropdown([""], value=defaults[name], label=LABELS[name],
                                           allow_custom_value=True,
                                           elem_id=f"new-job-columns-{role}")
        hint = gr.Markdown(elem_id="new-job-columns-hint")
    return {"columns_hint": hint}


def _option_groups(fields: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    zero2_visible, fsdp_visible = form_handlers.backend_options_visible(defaults["backend"])
    groups: dict[str, Any] = {}  # the groups, and the LoRA targets' button and answer
    with gr.Group(visible=form_handlers.lora_options_visible(defaults["method"]),
                  elem_id="new-job-lora-options") as groups["lora"]:
        with gr.Row():
            fields["lora_r"] = _integer("lora_r", defaults)
            fields["lora_alpha"] = gr.Number(defaults["lora_alpha"], label=LABELS["lora_alpha"],
                                             elem_id="new-job-lora-alpha")
            fields["lora_dropout"] = gr.Number(defaults["lora_dropout"], step=0.01,
                                               label=LABELS["lora_dropout"],
                                               elem_id="new-job-lora-dropout")
        with gr.Row():
            # Mixture-of-experts models only; a dense model has neither.
            fields["lora_experts"] = _checkbox("lora_experts", defaults)
            fields["lora_train_router"] = _checkbox("lora_train_router", defaults)
            groups["lora_targets_button"] = gr.Button(
                "What LoRA adapts", size="sm", elem_id="new-job-lora-targets-button")
        groups["lora_targets"] = gr.Markdown(elem_id="new-job-lora-targets")
    with gr.Group(visible=zero2_visible, elem_id="new-job-zero2-options") as groups["zero2"]:
        gr.Markdown("**DeepSpeed ZeRO-2 options**", padding=True)
        with gr.Row():
            for name in ("zero2_offload_optimizer", "zero2_overlap_comm",
                         "zero2_contiguous_gradients", "zero2_activation_checkpointing"):
                fields[name] = _checkbox(name, defaults)
        with gr.Row():
            for name in ("zero2_reduce_bucket_size", "zero2_allgather_bucket_size"):
                fields[name] = _integer(name, defaults, info="elements")
    with gr.Group(visible=fsdp_visible, elem_id="new-job-fsdp-options") as groups["fsdp"]:
        gr.Markdown("**FSDP options**", padding=True)
        with gr.Row():
            fields["fsdp_sharding_strategy"] = gr.Dropdown(
                list(SHARDING_STRATEGIES), value=defaults["fsdp_sharding_strategy"],
                label=LABELS["fsdp_sharding_strategy"],
                info="hybrid_shard needs several nodes", elem_id="new-job-fsdp-sharding-strategy")
            for name in ("fsdp_cpu_offload", "fsdp_activation_checkpointing"):
                fields[name] = _checkbox(name, defaults)
        with gr.Row():
            fields["fsdp_param_dtype"] = _dtype("fsdp_param_dtype", defaults,
                                                [SAME_AS_PRECISION, *DTYPES],
                                                info="forward/backward; masters stay fp32")
            fields["fsdp_reduce_dtype"] = _dtype("fsdp_reduce_dtype", defaults, list(DTYPES))
            fields["fsdp_buffer_dtype"] = _dtype("fsdp_buffer_dtype", defaults, list(DTYPES))
        with gr.Row():
            for name in ("fsdp_backward_prefetch", "fsdp_forward_prefetch", "fsdp_compile"):
                fields[name] = _checkbox(name, defaults)
    return groups

