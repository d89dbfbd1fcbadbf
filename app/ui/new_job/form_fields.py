"""The New job form's fields: the layout of every input (`form_fields`), and the small
builders it uses, one Gradio component per form field, by name."""
from __future__ import annotations

from typing import Any

import gradio as gr

from app.ui.new_job import option_visibility
from app.ui.new_job.column_handlers import column_choices
from app.ui.new_job.form_handlers import SAME_AS_PRECISION
from app.ui.new_job.form_labels import (COLUMN_ROLES, FORM_LABELS as LABELS,
                                        OBJECTIVE_COLUMN_ROLES, TYPED_FIELDS, spec_location)
from app.ui.new_job.typed_fields import (CHECKBOX, CHOICE, CHOICES, INTEGER, NUMBER,
                                         OPTIONAL_NUMBER, TEXT_LIST, TypedField)
from tunedeck.data.file_formats import DATASET_FILE_SUFFIXES
from tunedeck.spec.sections import ATTENTIONS, KERNELS, OBJECTIVES, PREFERENCE_LOSSES, REFERENCES
from tunedeck.spec.fields import (BACKEND_NAMES, DTYPES, EXPORT_DTYPES, LEARNING_RATE_SCHEDULES,
                                  METHODS, PRECISIONS, SHARDING_STRATEGIES, TRACKERS)
from tunedeck.spec.job_spec import spec_field
from tunedeck.planner.shape_source import has_experts


def _dtype(name: str, defaults: dict[str, Any], choices: list[str],
           info: str | None = None) -> gr.Dropdown:
    return gr.Dropdown(choices, value=defaults[name], label=LABELS[name], info=info,
                       elem_id=f"new-job-{name.replace('_', '-')}")


def _integer(name: str, defaults: dict[str, Any], info: str | None = None) -> gr.Number:
    return gr.Number(defaults[name], label=LABELS[name], info=info, precision=0,
                     elem_id=f"new-job-{name.replace('_', '-')}")


def _checkbox(name: str, defaults: dict[str, Any], *, visible: bool = True) -> gr.Checkbox:
    return gr.Checkbox(defaults[name], label=LABELS[name], visible=visible,
                       elem_id=f"new-job-{name.replace('_', '-')}")


def _backend_groups(backend: str):
    return tuple(gr.Group(visible=shown)
                 for shown in option_visibility.backend_options_visible(backend))


def _lora_group(method: str):
    return gr.Group(visible=option_visibility.lora_options_visible(method))


def _objective_options(objective: str):
    """The preference settings' group, then each column picker (COLUMN_ROLES' order)."""
    dpo, *columns = option_visibility.objective_options_visible(objective)
    return gr.Group(visible=dpo), *(gr.Dropdown(visible=shown) for shown in columns)


def _spec_words(name: str) -> dict[str, str]:
    """A field's label and help, both the spec's own (its title and description)."""
    return {"label": LABELS[name], "info": spec_field(spec_location(name)).description}


def form_fields(defaults: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The form's inputs by FORM_FIELDS name, and the option groups shown per choice (and
    the column pickers' hint, "columns_hint", and accordion, "dataset_options"; the upload
    button and its answer; the data check's button and panel)."""
    fields: dict[str, Any] = {}
    with gr.Row():
        fields["model"] = gr.Textbox(defaults["model"], label=LABELS["model"],
                                     info="local folder, Hugging Face id or builtin:tiny-llama",
                                     elem_id="new-job-model")
        with gr.Column():
            fields["dataset"] = gr.Textbox(defaults["dataset"], label=LABELS["dataset"],
                                           info=f"local {'/'.join(DATASET_FILE_SUFFIXES)} file, "
                                                "save_to_disk folder, Hugging Face id (org/name), "
                                                "builtin:arithmetic or (DPO) "
                                                "builtin:arithmetic-preference",
                                           elem_id="new-job-dataset")
            upload = _upload_button()
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
                           suggestions=suggestions, **upload)
    fields["name"] = gr.Textbox(defaults["name"], label=LABELS["name"], placeholder="optional",
                                elem_id="new-job-name")
    # What is learnt, right above how: SFT from examples, DPO from preference pairs (its
    # settings and the pairs' columns show once picked). One box, two rows: a fourth radio
    # does not fit the row of three at 1440 px (page_chrome's CSS keeps their options on one
    # line), and the objective's help would push its options below theirs.
    with gr.Group(elem_id="new-job-objective-and-method"):
        with gr.Row():
            fields["objective"] = gr.Radio([(name.upper(), name) for name in OBJECTIVES],
                                           value=defaults["objective"],
                                           elem_id="new-job-objective",
                                           **_spec_words("objective"))
        with gr.Row():
            fields["method"] = gr.Radio(list(METHODS), value=defaults["method"],
                                        label=LABELS["method"], elem_id="new-job-method")
            fields["backend"] = gr.Radio(list(BACKEND_NAMES), value=defaults["backend"],
                                         label=LABELS["backend"], elem_id="new-job-backend")
            fields["precision"] = gr.Radio(list(PRECISIONS), value=defaults["precision"],
                                           label=LABELS["precision"],
                                           elem_id="new-job-precision")
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
            fields["report_to"] = gr.Dropdown(
                list(TRACKERS), value=defaults["report_to"], multiselect=True,
                label=LABELS["report_to"], elem_id="new-job-report-to",
                # Gradio reads an info as Markdown of its own: any two stars italicise what
                # lies between, even in code; names in backticks keep their underscores.
                info="trackers the worker also writes the metrics to (set on the worker: "
                     "`TUNEDECK_MLFLOW_TRACKING_URI`, `TUNEDECK_WANDB_MODE`; online W&B "
                     "needs `WANDB_API_KEY`)")
    _speed_options(fields, defaults)
    groups = {**dataset_options, **_option_groups(fields, defaults)}
    _other_options(fields, defaults)
    return fields, groups


def _other_options(fields: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Every spec field laid out nowhere above, each an input made from its type, labelled
    with its title and helped by its description (form_labels.TYPED_FIELDS), three a row."""
    typed = list(TYPED_FIELDS.values())
    if not typed:
        return
    with gr.Accordion("Other options", open=False, elem_id="new-job-other-options"):
        for start in range(0, len(typed), 3):
            with gr.Row():
                for field in typed[start:start + 3]:
                    fields[field.name] = _typed_component(field, defaults[field.name])


def _typed_component(field: TypedField, value: Any) -> Any:
    """bool: a checkbox; a number: a number box (an optional one a text box: Gradio draws
    an empty number box as 0); a Literal: a dropdown (a list of them: a multiselect); text
    and a list of texts (comma-separated): a text box."""
    spec_words = spec_field(field.name)
    common = {"label": LABELS[field.name], "info": spec_words.description,
              "elem_id": f"new-job-{field.name.replace('_', '-')}"}
    if field.kind == CHECKBOX:
        return gr.Checkbox(value, **common)
    if field.kind in (INTEGER, NUMBER):
        return gr.Number(value, precision=0 if field.kind == INTEGER else None, **common)
    if field.kind in (CHOICE, CHOICES):
        return gr.Dropdown(list(field.choices), value=value, multiselect=field.kind == CHOICES,
                           **common)
    placeholder = {OPTIONAL_NUMBER: "empty: unset", TEXT_LIST: "comma-separated"}.get(field.kind)
    return gr.Textbox(value, placeholder=placeholder, **common)


def _speed_options(fields: dict[str, Any], defaults: dict[str, Any]) -> None:
    """The GPU speed options (kernels auto by default, the rest off; liger and flash need a
    CUDA worker with liger-kernel or flash-attn installed, which the worker checks before
    taking a GPU)."""
    with gr.Accordion("GPU speed", open=False, elem_id="new-job-speed-options"):
        with gr.Row():
            fields["kernels"] = _dtype("kernels", defaults, list(KERNELS),
                                       info="liger: Liger Kernel's fused norms, RoPE, SwiGLU "
                                            "and cross-entropy (no logits in memory); auto: "
                                            "liger for LoRA/QLoRA on a CUDA worker")
            fields["attention"] = _dtype("attention", defaults, list(ATTENTIONS),
                                         info="flash: flash-attn 2 (bf16/fp16)")
            fields["padding_free"] = _checkbox("padding_free", defaults)
            fields["fused_optimizer"] = _checkbox("fused_optimizer", defaults)


def _upload_button() -> dict[str, Any]:
    """The upload button beside the dataset field it fills, and its answer. Browsers match a
    file type by its last suffix: ".gz" lets a .jsonl.gz file be chosen, and the upload
    refuses other .gz files by name."""
    file_types = sorted({"." + suffix.rsplit(".", 1)[-1] for suffix in DATASET_FILE_SUFFIXES})
    button = gr.UploadButton("Upload a dataset file", file_types=file_types, type="filepath",
                             size="sm", elem_id="new-job-dataset-upload")
    return {"upload_button": button, "upload_message": gr.Markdown(elem_id="new-job-upload-result")}


def _dataset_options(fields: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A Hugging Face id's config and split, and the column pickers (choices: the dataset's
    columns where the web can read them cheaply; any name can be typed)."""
    with gr.Accordion("Dataset config, split and columns", open=False,
                      elem_id="new-job-dataset-options") as accordion:
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
            # The objective's columns only: sft's response and chat, or dpo's chosen and
            # rejected answers (the prompt and system prompt are both's).
            shown = OBJECTIVE_COLUMN_ROLES[defaults["objective"]]
            for role in COLUMN_ROLES:
                name = f"columns_{role}"
                fields[name] = gr.Dropdown(column_choices(role, []), value=defaults[name],
                                           label=LABELS[name], visible=role in shown,
                                           allow_custom_value=True,
                                           elem_id=f"new-job-columns-{role}")
        hint = gr.Markdown(elem_id="new-job-columns-hint")
    return {"columns_hint": hint, "dataset_options": accordion}


def _preference_options(fields: dict[str, Any], defaults: dict[str, Any]) -> gr.Group:
    """Objective dpo's settings (the spec's `dpo` section), shown once DPO is picked; each
    labelled and helped in the spec's words, as they say which loss reads them."""
    with gr.Group(visible=defaults["objective"] == "dpo",
                  elem_id="new-job-dpo-options") as group:
        gr.Markdown(f"**{spec_field('dpo').title} (DPO) options**", padding=True)
        with gr.Row():
            fields["dpo_loss"] = gr.Dropdown(list(PREFERENCE_LOSSES), value=defaults["dpo_loss"],
                                             elem_id="new-job-dpo-loss",
                                             **_spec_words("dpo_loss"))
            fields["dpo_beta"] = gr.Number(defaults["dpo_beta"], step=0.05,
                                           elem_id="new-job-dpo-beta", **_spec_words("dpo_beta"))
            fields["dpo_reference"] = gr.Dropdown(list(REFERENCES),
                                                  value=defaults["dpo_reference"],
                                                  elem_id="new-job-dpo-reference",
                                                  **_spec_words("dpo_reference"))
        with gr.Row():
            fields["dpo_label_smoothing"] = gr.Number(
                defaults["dpo_label_smoothing"], step=0.05, elem_id="new-job-dpo-label-smoothing",
                **_spec_words("dpo_label_smoothing"))
            # A text box: empty is unset (its weight then follows the loss), not 0.
            fields["dpo_sft_weight"] = gr.Textbox(
                defaults["dpo_sft_weight"], placeholder="empty: 1 for orpo, 0 otherwise",
                elem_id="new-job-dpo-sft-weight", **_spec_words("dpo_sft_weight"))
            fields["dpo_simpo_gamma"] = gr.Number(defaults["dpo_simpo_gamma"], step=0.1,
                                                  elem_id="new-job-dpo-simpo-gamma",
                                                  **_spec_words("dpo_simpo_gamma"))
    return group


def _option_groups(fields: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    zero2_visible, fsdp_visible = option_visibility.backend_options_visible(defaults["backend"])
    groups: dict[str, Any] = {}  # the groups, and the LoRA targets' button and answer
    with gr.Group(visible=option_visibility.lora_options_visible(defaults["method"]),
                  elem_id="new-job-lora-options") as groups["lora"]:
        with gr.Row():
            fields["lora_r"] = _integer("lora_r", defaults)
            fields["lora_alpha"] = gr.Number(defaults["lora_alpha"], label=LABELS["lora_alpha"],
                                             elem_id="new-job-lora-alpha")
            fields["lora_dropout"] = gr.Number(defaults["lora_dropout"], step=0.01,
                                               label=LABELS["lora_dropout"],
                                               elem_id="new-job-lora-dropout")
        with gr.Row():
            # Mixture-of-experts models only: a dense model has neither (the tab shows or
            # hides them as the model changes).
            moe = has_experts(defaults["model"]) is not False
            fields["lora_experts"] = _checkbox("lora_experts", defaults, visible=moe)
            fields["lora_train_router"] = _checkbox("lora_train_router", defaults, visible=moe)
            groups["lora_targets_button"] = gr.Button(
                "What LoRA adapts", size="sm", elem_id="new-job-lora-targets-button")
        groups["lora_targets"] = gr.Markdown(elem_id="new-job-lora-targets")
    groups["dpo"] = _preference_options(fields, defaults)
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

