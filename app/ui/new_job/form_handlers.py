"""The new-job form's handlers: plain form values in, a JobSpec, a preview or a job out.

The form is a dict keyed by FORM_FIELDS (the tab passes its components in that order).
"""
from __future__ import annotations

import html
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.actions import submit
from app.actions.errors import Invalid
from app.actions.input_checks import input_problems, missing_here, reference_problems
from app.auth.principal import Principal
from app.ui.new_job.form_labels import (COLUMN_ROLES, FORM_FIELDS, OBJECTIVE_COLUMN_ROLES,
                                        TYPED_FIELDS, field_errors, label_fields,
                                        problem_fields, problems_markdown)
from app.ui.new_job.option_visibility import METHODS_WITH_ADAPTER
from app.ui.new_job.plan_handlers import DEFAULT_GPU_MEMORY_GB, PlanView, plan_view
from app.ui.new_job.typed_fields import number_or_none
from app.views.cluster import slurm_site_for
from tunedeck.backends import backend_of
from tunedeck.launch_config import backend_config, build_torchrun_argv, trainer_settings
from tunedeck.cluster.host_capability import host_problems
from tunedeck.data.input_paths import PATH_FIELDS
from tunedeck.spec.job_spec import JobSpec
from tunedeck.spec.text import format_validation_error
from tunedeck.planner.shape_source import has_experts
from tunedeck.settings import Settings
from tunedeck.spec.sections import LoraSettings
from tunedeck.slurm.sbatch_script import preview_script

# The run folder a job of this web's host gets, its id not yet known.
PREVIEW_RUN_FOLDER = "job-<id>"
# The FSDP compute-dtype dropdown's first choice: leave the spec's fsdp.param_dtype unset.
SAME_AS_PRECISION = "same as precision"
CPU_RANKS_MEMORY_INFO = "not used: no GPU worker; planned on RAM per rank"
@dataclass(frozen=True)
class FormPreview:
    """The preview beside the form. With a bad field, `valid` is False: the config, trainer
    and command boxes keep what the last valid form showed, and `field_errors` names each
    bad field's problem (shown under the field) while `message` lists every problem."""

    config_title: str
    config_json: str
    trainer_json: str
    command_line: str
    message: str
    plan: PlanView = PlanView()
    valid: bool = True
    field_errors: dict[str, str] = field(default_factory=dict)
    # A field's note in place of its own while the form is valid (the GPU memory field on a
    # cluster of CPU workers, which the plan does not use).
    field_infos: dict[str, str] = field(default_factory=dict)


def form_values(values: tuple[Any, ...]) -> dict[str, Any]:
    """The tab's input values (in FORM_FIELDS order) as the form dict."""
    return dict(zip(FORM_FIELDS, values, strict=True))


# The built-in tiny model is random and small: at the spec's 2e-4 (right for LoRA on a real
# model) its loss barely moves in a short run; at 5e-3 it visibly learns.
REAL_MODEL_LEARNING_RATE = JobSpec.model_fields["learning_rate"].default
BUILTIN_MODEL_LEARNING_RATE = 5e-3


def default_learning_rate(model: str) -> float:
    return BUILTIN_MODEL_LEARNING_RATE if model.strip().startswith("builtin:") \
        else REAL_MODEL_LEARNING_RATE


def learning_rate_for_model(model: str, learning_rate: Any,
                            loaded: list | None = None) -> float | None:
    """The learning rate to show once the model changes: the new model's default while the
    box holds the other kind's default (a value the user typed is theirs); None: keep it.
    `loaded` is the [model, learning rate] a preset just set: the preset's rate is kept
    (the model's change event fires for a loaded model too)."""
    if loaded is not None and [model, learning_rate] == list(loaded):
        return None
    if learning_rate not in (REAL_MODEL_LEARNING_RATE, BUILTIN_MODEL_LEARNING_RATE):
        return None
    wanted = default_learning_rate(model or "")
    return wanted if wanted != learning_rate else None


def default_form() -> dict[str, Any]:
    """The form's starting values: the spec's defaults, with a short run of 2 ranks (and a
    learning rate the default model learns at; adapters on expert weights only where the
    default model has experts)."""
    spec = JobSpec(num_gpus=2, max_steps=20)
    return {**spec_to_form(spec), "gpu_memory_gb": DEFAULT_GPU_MEMORY_GB,
            "learning_rate": default_learning_rate(spec.model),
            "lora_experts": spec.lora.experts and has_experts(spec.model) is not False}


def expert_options(moe: bool | None, *,
                   keep_value: bool = False) -> tuple[bool, bool | None, bool | None]:
    """(show the expert and router options, the expert box's new value, the router box's;
    None: keep it) for a model with experts (True), a dense one (False) or one that cannot
    be read (None: offered as they are). A dense model has neither: both off and hidden.
    A model with experts gets the spec's default, unless `keep_value` (a preset just set the
    boxes for this model)."""
    if moe is False:
        return False, False, False
    if moe is None or keep_value:
        return True, None, None
    return True, LoraSettings().experts, None



def spec_to_form(spec: JobSpec) -> dict[str, Any]:
    """The form's values that make `spec` (form_to_spec gives it back, for what the form
    has fields for): every field but gpu_memory_gb, which is the planner's, not the spec's.
    Unset texts are empty boxes, as the form's own empty fields are. The fields laid out by
    hand are mapped here one by one; the rest (TYPED_FIELDS) by their types."""
    return {
        "name": spec.name or "", "model": spec.model, "dataset": spec.dataset,
        "objective": spec.objective, "method": spec.method,
        "dataset_config": spec.dataset_config or "", "dataset_split": spec.dataset_split,
        "eval_dataset_split": spec.eval_dataset_split,
        **{f"columns_{role}": getattr(spec.columns, role) or "" for role in COLUMN_ROLES},
        "backend": spec.backend, "precision": spec.precision, "num_gpus": spec.num_gpus,
        # A text box (see the tab): "" is unset; %g keeps 2 as "2", not "2.0".
        "max_steps": spec.max_steps, "epochs": "" if spec.epochs is None else f"{spec.epochs:g}",
        "learning_rate": spec.learning_rate,
        "micro_batch_size": spec.micro_batch_size, "grad_accum": spec.grad_accum,
        "seq_len": spec.seq_len, "lr_schedule": spec.lr_schedule,
        "warmup_steps": spec.warmup_steps, "weight_decay": spec.weight_decay,
        "max_grad_norm": spec.max_grad_norm, "seed": spec.seed, "packing": spec.packing,
        "kernels": spec.kernels, "attention": spec.attention, "padding_free": spec.padding_free,
        "fused_optimizer": spec.fused_optimizer,
        "eval_split": spec.eval_split, "eval_dataset": spec.eval_dataset or "",
        "eval_every_steps": spec.eval_every_steps,
        "checkpoint_every_steps": spec.checkpoint_every_steps,
        "keep_checkpoints": spec.keep_checkpoints, "export_dtype": spec.export_dtype,
        "report_to": list(spec.report_to),
        "lora_r": spec.lora.r, "lora_alpha": spec.lora.alpha,
        "lora_dropout": spec.lora.dropout, "lora_experts": spec.lora.experts,
        "lora_train_router": spec.lora.train_router,
        "dpo_beta": spec.dpo.beta, "dpo_loss": spec.dpo.loss,
        "dpo_label_smoothing": spec.dpo.label_smoothing, "dpo_reference": spec.dpo.reference,
        # A text box, as epochs: "" is unset (1 for orpo, 0 otherwise).
        "dpo_sft_weight": "" if spec.dpo.sft_weight is None else f"{spec.dpo.sft_weight:g}",
        "dpo_simpo_gamma": spec.dpo.simpo_gamma,
        "zero2_offload_optimizer": spec.zero2.offload_optimizer,
        "zero2_overlap_comm": spec.zero2.overlap_comm,
        "zero2_contiguous_gradients": spec.zero2.contiguous_gradients,
        "zero2_reduce_bucket_size": spec.zero2.reduce_bucket_size,
        "zero2_allgather_bucket_size": spec.zero2.allgather_bucket_size,
        "zero2_activation_checkpointing": spec.zero2.activation_checkpointing,
        "fsdp_sharding_strategy": spec.fsdp.sharding_strategy,
        "fsdp_cpu_offload": spec.fsdp.cpu_offload,
        "fsdp_activation_checkpointing": spec.fsdp.activation_checkpointing,
        "fsdp_param_dtype": spec.fsdp.param_dtype or SAME_AS_PRECISION,
        "fsdp_reduce_dtype": spec.fsdp.reduce_dtype,
        "fsdp_buffer_dtype": spec.fsdp.buffer_dtype,
        "fsdp_backward_prefetch": spec.fsdp.backward_prefetch,
        "fsdp_forward_prefetch": spec.fsdp.forward_prefetch,
        "fsdp_compile": spec.fsdp.compile,
        # The fields made from their types ("Other options"): no edit here for a new one.
        **{name: typed.to_form(getattr(spec, name)) for name, typed in TYPED_FIELDS.items()},
    }


def form_to_spec_data(form: dict[str, Any]) -> dict[str, Any]:
    """The spec's JSON shape of the form. LoRA settings go in only for adapter methods, so a
    hidden LoRA field never blocks a full fine-tune; the preference settings (and the chosen
    and rejected columns) only for objective dpo, and the response and chat columns only for
    sft, so switching the objective back and forth leaves no hidden field behind."""
    objective = form["objective"]
    columns = OBJECTIVE_COLUMN_ROLES.get(objective, COLUMN_ROLES)
    data: dict[str, Any] = {
        "name": _text_or_none(form["name"]),
        "model": _text(form["model"]),
        "dataset": _text(form["dataset"]),
        "dataset_config": _text_or_none(form["dataset_config"]),
        # An emptied split box is the default split, not an invalid empty name.
        "dataset_split": _text(form["dataset_split"]) or "train",
        "columns": {role: _text_or_none(form[f"columns_{role}"]) for role in columns},
        "objective": objective,
        "method": form["method"],
        "backend": form["backend"],
        "precision": form["precision"],
        "num_gpus": form["num_gpus"],
        # An empty (or 0) length is unset, so the spec can say "set max_steps or epochs".
        "max_steps": form["max_steps"] or None,
        # 0 (or an empty box) leaves the step count to max_steps.
        "epochs": number_or_none(form["epochs"], integer=False) or None,
        "learning_rate": form["learning_rate"],
        "micro_batch_size": form["micro_batch_size"],
        "grad_accum": form["grad_accum"],
        "seq_len": form["seq_len"],
        "lr_schedule": form["lr_schedule"],
        "warmup_steps": form["warmup_steps"],
        "weight_decay": form["weight_decay"],
        "max_grad_norm": form["max_grad_norm"],
        "seed": form["seed"],
        "packing": bool(form["packing"]),
        "kernels": form["kernels"],
        "attention": form["attention"],
        "padding_free": bool(form["padding_free"]),
        "fused_optimizer": bool(form["fused_optimizer"]),
        "eval_split": form["eval_split"] or 0,
        "eval_dataset": _text_or_none(form["eval_dataset"]),
        "eval_dataset_split": _text(form["eval_dataset_split"]) or "test",
        "eval_every_steps": form["eval_every_steps"] or 0,
        "checkpoint_every_steps": form["checkpoint_every_steps"] or 0,
        "keep_checkpoints": form["keep_checkpoints"],
        "export_dtype": form["export_dtype"],
        # The multiselect answers None when emptied.
        "report_to": list(form["report_to"] or []),
        "zero2": {"offload_optimizer": bool(form["zero2_offload_optimizer"]),
                  "overlap_comm": bool(form["zero2_overlap_comm"]),
                  "contiguous_gradients": bool(form["zero2_contiguous_gradients"]),
                  "reduce_bucket_size": form["zero2_reduce_bucket_size"],
                  "allgather_bucket_size": form["zero2_allgather_bucket_size"],
                  "activation_checkpointing": bool(form["zero2_activation_checkpointing"])},
        "fsdp": {"sharding_strategy": form["fsdp_sharding_strategy"],
                 "cpu_offload": bool(form["fsdp_cpu_offload"]),
                 "activation_checkpointing": bool(form["fsdp_activation_checkpointing"]),
                 "param_dtype": (None if form["fsdp_param_dtype"] == SAME_AS_PRECISION
                                 else form["fsdp_param_dtype"]),
                 "reduce_dtype": form["fsdp_reduce_dtype"],
                 "buffer_dtype": form["fsdp_buffer_dtype"],
                 "backward_prefetch": bool(form["fsdp_backward_prefetch"]),
                 "forward_prefetch": bool(form["fsdp_forward_prefetch"]),
                 "compile": bool(form["fsdp_compile"])},
        **{name: typed.to_spec(form[name]) for name, typed in TYPED_FIELDS.items()},
    }
    if form["method"] in METHODS_WITH_ADAPTER:
        data["lora"] = {"r": form["lora_r"], "alpha": form["lora_alpha"],
                        "dropout": form["lora_dropout"], "experts": bool(form["lora_experts"]),
                        "train_router": bool(form["lora_train_router"])}
    if objective == "dpo":
        data["dpo"] = {"beta": form["dpo_beta"], "loss": form["dpo_loss"],
                       "label_smoothing": form["dpo_label_smoothing"] or 0,
                       "reference": form["dpo_reference"],
                       "sft_weight": number_or_none(form["dpo_sft_weight"], integer=False),
                       "simpo_gamma": form["dpo_simpo_gamma"]}
    return data


def _text(value: Any) -> str:
    return (value or "").strip()


def _text_or_none(value: Any) -> str | None:
    return _text(value) or None


def form_to_spec(form: dict[str, Any]) -> tuple[JobSpec | None, str]:
    """(the validated spec, "") or (None, one readable line per bad field)."""
    spec, problems = _validated(form)
    return spec, label_fields(problems)


def _validated(form: dict[str, Any]) -> tuple[JobSpec | None, str]:
    try:
        return JobSpec.model_validate(form_to_spec_data(form)), ""
    except ValidationError as error:
        return None, format_validation_error(error)


def preview_form(form: dict[str, Any], *, principal: Principal, settings: Settings,
                 database=None) -> FormPreview:
    """What the job would run: the backend config and the torchrun command, or the errors,
    and its memory plan as `principal` may see it. An input submit would refuse (a path
    outside the allowed folders, a model folder without config.json, dataset columns that do
    not map) is marked beside its field, and with `database`, a choice no registered worker
    can run (submit refuses them the same way)."""
    spec, raw_problems = _validated(form)
    if spec is None:
        # The paths are judged whatever else is wrong: fixing the learning rate must not be
        # what reveals that the model folder is outside the allowed ones.
        flagged = {line.split(":", 1)[0] for line in raw_problems.splitlines()}
        references = {name: _text(form[name]) for name in PATH_FIELDS}
        raw_problems = "\n".join([raw_problems, *(
            f"{name}: {message}" for name, message in reference_problems(
                references, principal=principal, settings=settings) if name not in flagged)])
        return FormPreview("Generated config: the last valid form's (fix the fields marked in red)",
                           "", "", "", problems_markdown(label_fields(raw_problems)),
                           valid=False, field_errors=field_errors(raw_problems))
    title = backend_of(spec).preview_title
    config_json = json.dumps(backend_config(spec), indent=2)
    trainer_json = json.dumps(trainer_preview(spec), indent=2)
    command_line = shlex.join(build_torchrun_argv(
        spec, str(settings.runs_dir / PREVIEW_RUN_FOLDER)))
    site = (None if database is None else slurm_site_for(
        spec, database=database, worker_lost_seconds=settings.worker_lost_seconds))
    if site is not None:  # its queue is a Slurm executor's: the script it would submit
        command_line = preview_script(spec, site)
    workers = [] if database is None else submit.live_workers(database=database,
                                                              settings=settings)
    plan = plan_view(spec, form, principal=principal, settings=settings, workers=workers)
    infos = {"gpu_memory_gb": CPU_RANKS_MEMORY_INFO} if plan.per == "rank" else {}
    # Not an error: a worker on another host may hold the path (it checks on its own).
    infos.update(missing_here(spec))
    # The checks submit makes, so a bad input is marked under its field before Submit.
    refused = input_problems(spec, principal=principal, settings=settings) + \
        host_problems(spec, workers)
    if refused:
        lines = "\n".join(f"{name}: {message}" for name, message in refused)
        return FormPreview(title, config_json, trainer_json, command_line,
                           problems_markdown(label_fields(lines)), plan,
                           field_errors=field_errors(lines), field_infos=infos)
    return FormPreview(title, config_json, trainer_json, command_line, plan.warning, plan,
                       field_infos=infos)


def submit_form(form: dict[str, Any], *, database, celery_app, principal: Principal,
                settings: Settings) -> tuple[int | None, str]:
    """(new job id, confirmation) or (None, why it was refused). Nothing is stored on refusal.
    `principal` is who submits: their paths and trust_remote_code are checked like the API's."""
    spec, problems = form_to_spec(form)
    if spec is None:  # each problem is shown beside its field already: not again here
        return None, ('<div class="field-error">Not submitted: fix what is marked in red '
                      f"({html.escape(', '.join(problem_fields(problems)))}).</div>")
    try:
        job = submit.submit(principal, spec, database=database, celery_app=celery_app,
                            settings=settings)
    except Invalid as refused:
        return None, "Not submitted. " + problems_markdown(str(refused))
    warning = plan_view(spec, form, principal=principal, settings=settings,
                        workers=submit.live_workers(database=database, settings=settings)).warning
    return job.id, (f"Submitted job **{job.id}** ({job.name}): status `{job.status}`."
                    + (f"\n\n{warning}" if warning else ""))


def trainer_preview(spec: JobSpec) -> dict[str, Any]:
    """The trainer settings the preview shows: the core's, computed by what the ranks run."""
    return trainer_settings(spec)
