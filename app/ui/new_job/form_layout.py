"""The New job form's layout table: where each spec location sits on the form, and, only where
its type does not say it, which input it takes and the form's own short words for it.

Everything else derives from it: the form's keys (`lora.r` -> `lora_r`) and their order
(FORM_FIELDS, the tab's inputs), each input's kind and value each way (`FORM_INPUTS`, made
from the field's type by typed_fields), its label (the spec field's `title`), and so the
round trip spec -> form -> spec (form_handlers). A spec field with no line here is placed by
its type: a top-level one under "Other options", a section's at the foot of its section's
area; LEFT_OUT names the few the form has no input for. So a new spec field needs no edit
here, and a place of its own is one line.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from app.ui.new_job.typed_fields import COLUMN, INTEGER, NUMBER, RADIO, TypedField, typed_field
from tunedeck.data.file_formats import DATASET_FILE_SUFFIXES
from tunedeck.spec.fields import BACKEND_NAMES
from tunedeck.spec.job_spec import JobSpec, spec_field


class Help(Enum):
    """A place's help line (the component's `info`), besides the form's own short words."""

    NONE = "none"  # the label says enough: a compact row of numbers or switches
    DESCRIPTION = "description"  # the spec field's own description, whole


@dataclass(frozen=True)
class Place:
    location: str  # the spec's dotted location: `learning_rate`, `lora.r`, `columns.prompt`
    area: str  # the part of the form it sits in (AREAS)
    row: int = 1  # its row in the area, from the top; a row's inputs in the table's order
    kind: str | None = None  # an input other than its type makes (typed_fields' kinds)
    help: str | Help | None = None  # the form's own words; None: the area's (AREA_HELP)
    placeholder: str | None = None
    step: float | None = None  # a number box's arrows
    choice_label: Callable[[str], str] | None = None  # a choice as the form names it
    unset_choice: str | None = None  # an optional choice's "unset" entry, in the form's words
    empty_is_default: bool = False  # an emptied input is the field's default
    zero_is_unset: bool = False  # 0 is unset, as an emptied box is

    @property
    def key(self) -> str:
        return form_key(self.location)


def form_key(location: str) -> str:
    """The form's key of a spec location: `lora.r` -> `lora_r` (as the plan's changes and
    the components' ids spell it)."""
    return location.replace(".", "_")


OTHER_OPTIONS_AREA = "other"
# The GRPO options, grouped as a user reads them: how completions are sampled, what rewards
# them, how the loss is taken (with the rollouts the job keeps).
GRPO_AREAS = ("grpo sampling", "grpo rewards", "grpo loss")
# The areas of the form, top to bottom (form_fields.build_form lays each out in its box): a
# section's group is named as the section is, one a backend.
AREAS = ("data", "dataset options", "name", "objective and method", "training", "evaluation",
         "speed", "lora", "dpo", *GRPO_AREAS, *BACKEND_NAMES, OTHER_OPTIONS_AREA)
# Rows there give no help line unless they say one: the form stays compact. The preference
# options show the spec's words, which say which loss reads each; "Other options" holds
# fields nobody laid out, whose description is all the form knows of them.
AREA_HELP = {"dpo": Help.DESCRIPTION, OTHER_OPTIONS_AREA: Help.DESCRIPTION,
             **{area: Help.DESCRIPTION for area in GRPO_AREAS}}
# The form's own inputs, which are no spec field: the card size is the memory plan's.
FORM_ONLY_LABELS = {"gpu_memory_gb": "GPU memory (GB)"}
# The FSDP compute dtype's unset choice: fsdp.param_dtype then follows `precision`.
SAME_AS_PRECISION = "same as precision"

PLACES = (
    Place("model", "data", help="local folder, Hugging Face id or builtin:tiny-llama"),
    Place("dataset", "data",
          help=f"local {'/'.join(DATASET_FILE_SUFFIXES)} file, save_to_disk folder, Hugging Face "
               "id (org/name), builtin:arithmetic or (DPO) builtin:arithmetic-preference"),
    Place("dataset_config", "dataset options", placeholder="a Hugging Face id's, optional"),
    Place("dataset_split", "dataset options",
          help="e.g. train or train[:10%]; a file is read whole", empty_is_default=True),
    *(Place(f"columns.{role}", "dataset options", 2, kind=COLUMN)
      for role in ("prompt", "response", "messages", "system", "chosen", "rejected")),
    Place("name", "name", placeholder="optional"),
    Place("objective", "objective and method", kind=RADIO, help=Help.DESCRIPTION,
          choice_label=str.upper),
    Place("method", "objective and method", 2, kind=RADIO),
    Place("backend", "objective and method", 2, kind=RADIO),
    Place("precision", "objective and method", 2, kind=RADIO),
    Place("num_gpus", "training", help="ranks on this host"),
    Place("gpu_memory_gb", "training", kind=NUMBER, help="for the memory plan"),
    # A number box, not the text box its optional type makes: it is mostly set.
    Place("max_steps", "training", kind=INTEGER, help="or leave empty and set epochs",
          zero_is_unset=True),
    Place("epochs", "training", help="passes over the data, instead of steps",
          placeholder="empty: the steps say", zero_is_unset=True),
    Place("learning_rate", "training", step=1e-5,
          help="2e-4 suits LoRA on real models, 5e-3 the tiny built-in one (set as the model "
               "changes)"),
    Place("micro_batch_size", "training", 2),
    Place("grad_accum", "training", 2),
    Place("seq_len", "training", 2),
    Place("lr_schedule", "training", 3, help="after warmup; decays to 10% of the peak"),
    Place("warmup_steps", "training", 3),
    Place("weight_decay", "training", 3, step=0.01),
    Place("max_grad_norm", "training", 3, step=0.1, help="0: no clipping"),
    Place("eval_split", "evaluation", step=0.05, help="fraction held out (0: none)",
          empty_is_default=True),
    Place("eval_dataset", "evaluation", placeholder="or a separate dataset"),
    Place("eval_dataset_split", "evaluation", help="when it is a Hugging Face id or a folder",
          empty_is_default=True),
    Place("eval_every_steps", "evaluation", help="0: only at the end", empty_is_default=True),
    Place("checkpoint_every_steps", "evaluation", 2, help="0: none; needed to Resume",
          empty_is_default=True),
    Place("keep_checkpoints", "evaluation", 2, help="newest kept"),
    Place("seed", "evaluation", 2, help="data order, init and dropout"),
    Place("packing", "evaluation", 2),
    Place("export_dtype", "evaluation", 3, help="auto: the base model's stored dtype"),
    # Gradio reads an info as Markdown of its own: any two stars italicise what lies
    # between, even in code; names in backticks keep their underscores.
    Place("report_to", "evaluation", 3,
          help="trackers the worker also writes the metrics to (set on the worker: "
               "`TUNEDECK_MLFLOW_TRACKING_URI`, `TUNEDECK_WANDB_MODE`; online W&B needs "
               "`WANDB_API_KEY`)"),
    Place("kernels", "speed",
          help="liger: Liger Kernel's fused norms, RoPE, SwiGLU and cross-entropy (no logits "
               "in memory); auto: liger for LoRA/QLoRA on a CUDA worker"),
    Place("attention", "speed", help="flash: flash-attn 2 (bf16/fp16)"),
    Place("padding_free", "speed"),
    Place("fused_optimizer", "speed"),
    Place("lora.r", "lora"),
    Place("lora.alpha", "lora"),
    Place("lora.dropout", "lora", step=0.01),
    Place("lora.experts", "lora", 2),
    Place("lora.train_router", "lora", 2),
    Place("dpo.loss", "dpo"),
    Place("dpo.beta", "dpo", step=0.05),
    Place("dpo.reference", "dpo"),
    Place("dpo.label_smoothing", "dpo", 2, step=0.05, empty_is_default=True),
    Place("dpo.sft_weight", "dpo", 2, placeholder="empty: 1 for orpo, 0 otherwise"),
    Place("dpo.simpo_gamma", "dpo", 2, step=0.1),
    Place("grpo.num_generations", "grpo sampling"),
    Place("grpo.max_completion_length", "grpo sampling"),
    Place("grpo.temperature", "grpo sampling", step=0.1),
    Place("grpo.top_p", "grpo sampling", 2, step=0.05),
    Place("grpo.top_k", "grpo sampling", 2),
    Place("grpo.rewards", "grpo rewards"),
    Place("grpo.loss_type", "grpo loss"),
    Place("grpo.scale_rewards", "grpo loss"),
    Place("grpo.beta", "grpo loss", step=0.01),
    Place("grpo.epsilon", "grpo loss", 2, step=0.01),
    Place("grpo.epsilon_high", "grpo loss", 2, placeholder="empty: epsilon"),
    Place("grpo.num_iterations", "grpo loss", 2),
    Place("grpo.mask_truncated_completions", "grpo loss", 3),
    Place("grpo.rollouts_every", "grpo loss", 3),
    Place("grpo.rollout_prompts", "grpo loss", 3),
    Place("zero2.offload_optimizer", "zero2"),
    Place("zero2.overlap_comm", "zero2"),
    Place("zero2.contiguous_gradients", "zero2"),
    Place("zero2.activation_checkpointing", "zero2"),
    Place("zero2.reduce_bucket_size", "zero2", 2, help="elements"),
    Place("zero2.allgather_bucket_size", "zero2", 2, help="elements"),
    Place("fsdp.sharding_strategy", "fsdp", help="hybrid_shard needs several nodes"),
    Place("fsdp.cpu_offload", "fsdp"),
    Place("fsdp.activation_checkpointing", "fsdp"),
    Place("fsdp.param_dtype", "fsdp", 2, help="forward/backward; masters stay fp32",
          unset_choice=SAME_AS_PRECISION),
    Place("fsdp.reduce_dtype", "fsdp", 2),
    Place("fsdp.buffer_dtype", "fsdp", 2),
    Place("fsdp.backward_prefetch", "fsdp", 3),
    Place("fsdp.forward_prefetch", "fsdp", 3),
    Place("fsdp.compile", "fsdp", 3),
)
# The spec fields the form has no input for, and why (a preset with one says so on Load).
# Deleting a line gives the field an input made from its type.
LEFT_OUT = {
    "num_nodes": "the form plans one host's ranks; several nodes are a spec's",
    "queue": "placement: a spec's, the API's or the CLI's",
    "host": "placement: a spec's, the API's or the CLI's",
    "max_restarts": "a spec's, the API's or the CLI's",
    "trust_remote_code": "an admin's, in a spec",
    "lora.target_modules": "`all-linear` or module names: a spec's (What LoRA adapts shows them)",
}
PLACED_BY_TYPE_PER_ROW = 3


def _spec_leaves(model: type, prefix: str = "") -> list[str]:
    """Every field of the spec, a section's as SECTION.FIELD, in the spec's order."""
    leaves = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields"):
            leaves += _spec_leaves(field.annotation, f"{prefix}{name}.")
        else:
            leaves.append(prefix + name)
    return leaves


def _placed_by_type(places: tuple[Place, ...]) -> tuple[Place, ...]:
    """A place for each spec field the table neither places nor leaves out and whose type
    makes an input: a top-level field in "Other options", a section's in new rows at the
    foot of the area its section's placed fields sit in (or the area named as the section),
    three a row."""
    section_area = {section: section for section in AREAS}
    section_area.update((place.location.split(".")[0], place.area)
                        for place in places if "." in place.location)
    placed = {place.location for place in places} | set(LEFT_OUT)
    found: dict[str, list[str]] = {}
    for location in _spec_leaves(JobSpec):
        section = location.split(".")[0] if "." in location else None
        if location not in placed and typed_field(location, spec_field(location)) is not None:
            found.setdefault(section_area.get(section, OTHER_OPTIONS_AREA), []).append(location)
    made = []
    for area, locations in found.items():
        last_row = max((place.row for place in places if place.area == area), default=0)
        made += [Place(location, area, last_row + 1 + index // PLACED_BY_TYPE_PER_ROW)
                 for index, location in enumerate(locations)]
    return tuple(made)


def _typed_input(place: Place) -> TypedField:
    """The input at a place: its type's (or the table's kind), with the table's value rules."""
    if place.key in FORM_ONLY_LABELS:
        return TypedField(place.key, place.kind or NUMBER)
    field = spec_field(place.location)
    typed = typed_field(place.key, field)
    if typed is None:
        raise ValueError(f"{place.location}: its type makes no input; leave it out (LEFT_OUT)")
    return replace(typed, kind=place.kind or typed.kind,
                   unset_choice=place.unset_choice or typed.unset_choice,
                   empty_is_default=place.empty_is_default,
                   default=field.default if place.empty_is_default else None,
                   zero_is_unset=place.zero_is_unset)


# Every input of the form, in the order of the tab's inputs: the table's, then those placed
# by their types.
FORM_PLACES: tuple[Place, ...] = PLACES + _placed_by_type(PLACES)
FORM_FIELDS: tuple[str, ...] = tuple(place.key for place in FORM_PLACES)
FORM_INPUTS: dict[str, TypedField] = {place.key: _typed_input(place) for place in FORM_PLACES}
# The spec's fields on the form, by key (all but FORM_ONLY_LABELS').
SPEC_FORM_FIELDS = tuple(key for key in FORM_FIELDS if key not in FORM_ONLY_LABELS)
# The top-level fields the table does not place, in "Other options".
OTHER_OPTIONS = tuple(place.key for place in FORM_PLACES if place.area == OTHER_OPTIONS_AREA)
_LOCATIONS = {place.key: place.location for place in FORM_PLACES}


def spec_location(key: str) -> str:
    """`lora_r` -> `lora.r`; a top-level field is its own name."""
    return _LOCATIONS[key]


# Form key -> its label: the spec field's own title.
FORM_LABELS: dict[str, str] = {
    key: FORM_ONLY_LABELS.get(key) or spec_field(spec_location(key)).title for key in FORM_FIELDS}


def place_help(place: Place) -> str | None:
    """The help line under a place's input: its own words, or its area's rule."""
    chosen = place.help or AREA_HELP.get(place.area, Help.NONE)
    if chosen is Help.DESCRIPTION:
        return spec_field(place.location).description
    return None if chosen is Help.NONE else chosen


def area_rows(area: str) -> list[list[Place]]:
    """An area's places, row by row from the top, each row in the table's order."""
    rows = sorted({place.row for place in FORM_PLACES if place.area == area})
    return [[place for place in FORM_PLACES if place.area == area and place.row == row]
            for row in rows]
