"""The new-job form's handlers: plain form values in, a JobSpec, a preview or a job out.

The form is a dict keyed by FORM_FIELDS (the tab passes its components in that order); which
spec location each key holds, and how its value reads each way, is form_layout's table.
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
from app.ui.new_job.form_labels import (field_errors, label_fields, problem_fields,
                                        problems_markdown)
from app.ui.new_job.form_layout import FORM_FIELDS, FORM_INPUTS, SPEC_FORM_FIELDS, spec_location
from app.ui.new_job.option_visibility import location_sent
from app.ui.new_job.plan_handlers import DEFAULT_GPU_MEMORY_GB, PlanView, plan_view
from app.views.cluster import slurm_site_for
from tunedeck.backends import backend_of
from tunedeck.launch_config import backend_config, build_torchrun_argv, trainer_settings
from tunedeck.cluster.host_capability import host_problems
from tunedeck.data.input_paths import PATH_FIELDS
from tunedeck.spec.job_spec import JobSpec
from tunedeck.spec.text import format_validation_error, spec_as_yaml
from tunedeck.planner.shape_source import has_experts
from tunedeck.settings import Settings
from tunedeck.spec.sections import LoraSettings
from tunedeck.slurm.sbatch_script import preview_script

# The run folder a job of this web's host gets, its id not yet known.
PREVIEW_RUN_FOLDER = "job-<id>"
CPU_RANKS_MEMORY_INFO = "not used: no GPU worker; planned on RAM per rank"


@dataclass(frozen=True)
class FormPreview:
    """The preview beside the form. With a bad field, `valid` is False: the spec, config,
    trainer and command boxes keep what the last valid form showed, and `field_errors` names
    each bad field's problem (shown under the field) while `message` lists every problem."""

    config_title: str
    config_json: str
    trainer_json: str
    command_line: str
    message: str
    plan: PlanView = PlanView()
    valid: bool = True
    # The job's spec as `tunedeck submit` takes it (tunedeck.spec.text.spec_as_yaml): what
    # every other box is made from, and where a field shows before anything reads it.
    spec_yaml: str = ""
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
    has fields for): every field but the form's own (gpu_memory_gb, the planner's). Each
    input reads its value as form_layout's table and the field's type say."""
    return {key: FORM_INPUTS[key].to_form(_value_at(spec, spec_location(key)))
            for key in SPEC_FORM_FIELDS}


def form_to_spec_data(form: dict[str, Any]) -> dict[str, Any]:
    """The spec's JSON shape of the form: each field at its spec location, but those its
    choices hide (option_visibility.location_sent: LoRA settings for adapter methods only,
    the preference settings and each column for the objective that reads them)."""
    data: dict[str, Any] = {}
    for key in SPEC_FORM_FIELDS:
        location = spec_location(key)
        if location_sent(location, form):
            *sections, name = location.split(".")
            section = data
            for part in sections:
                section = section.setdefault(part, {})
            section[name] = FORM_INPUTS[key].to_spec(form[key])
    return data


def _value_at(spec: JobSpec, location: str) -> Any:
    value = spec
    for part in location.split("."):
        value = getattr(value, part)
    return value


def _text(value: Any) -> str:
    return (value or "").strip()


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
    """What the job would run: its spec, the backend config and the torchrun command, or the
    errors, and its memory plan as `principal` may see it. An input submit would refuse (a
    path outside the allowed folders, a model folder without config.json, dataset columns
    that do not map) is marked beside its field, and with `database`, a choice no registered
    worker can run (submit refuses them the same way)."""
    spec, raw_problems = _validated(form)
    if spec is None:
        return _invalid_preview(form, raw_problems, principal=principal, settings=settings)
    command_line = shlex.join(build_torchrun_argv(
        spec, str(settings.runs_dir / PREVIEW_RUN_FOLDER)))
    site = (None if database is None else slurm_site_for(
        spec, database=database, worker_lost_seconds=settings.worker_lost_seconds))
    if site is not None:  # its queue is a Slurm executor's: the script it would submit
        command_line = preview_script(spec, site)
    workers = [] if database is None else submit.live_workers(database=database,
                                                              settings=settings)
    plan = plan_view(spec, form, principal=principal, settings=settings, workers=workers,
                     database=database)
    infos = {"gpu_memory_gb": CPU_RANKS_MEMORY_INFO} if plan.per == "rank" else {}
    # Not an error: a worker on another host may hold the path (it checks on its own).
    infos.update(missing_here(spec))
    # The checks submit makes, so a bad input is marked under its field before Submit.
    refused = input_problems(spec, principal=principal, settings=settings) + \
        host_problems(spec, workers)
    lines = "\n".join(f"{name}: {message}" for name, message in refused)
    return FormPreview(
        backend_of(spec).preview_title, json.dumps(backend_config(spec), indent=2),
        json.dumps(trainer_preview(spec), indent=2), command_line,
        problems_markdown(label_fields(lines)) if refused else plan.warning, plan,
        spec_yaml=spec_as_yaml(spec), field_errors=field_errors(lines), field_infos=infos)


def _invalid_preview(form: dict[str, Any], raw_problems: str, *, principal: Principal,
                     settings: Settings) -> FormPreview:
    """The problems of a form that makes no spec, each beside its field. The paths are
    judged whatever else is wrong: fixing the learning rate must not be what reveals that
    the model folder is outside the allowed ones."""
    flagged = {line.split(":", 1)[0] for line in raw_problems.splitlines()}
    references = {name: _text(form[name]) for name in PATH_FIELDS}
    problems = "\n".join([raw_problems, *(
        f"{name}: {message}" for name, message in reference_problems(
            references, principal=principal, settings=settings) if name not in flagged)])
    return FormPreview("Generated config: the last valid form's (fix the fields marked in red)",
                       "", "", "", problems_markdown(label_fields(problems)),
                       valid=False, field_errors=field_errors(problems))


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
                        workers=submit.live_workers(database=database, settings=settings),
                        database=database).warning
    return job.id, (f"Submitted job **{job.id}** ({job.name}): status `{job.status}`."
                    + (f"\n\n{warning}" if warning else ""))


def trainer_preview(spec: JobSpec) -> dict[str, Any]:
    """The trainer settings the preview shows: the core's, computed by what the ranks run."""
    return trainer_settings(spec)
