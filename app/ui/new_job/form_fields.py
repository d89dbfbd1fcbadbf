"""The New job form's components, built by walking the layout table (form_layout): an input a
place, labelled with its spec field's title, in its area's box and row. `build_form` says
where each area goes on the page and what sits beside the fields (the upload button, the
suggestions, the data check, What LoRA adapts), none of which is a spec field."""
from __future__ import annotations

import html
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.ui.new_job import option_visibility
from app.ui.new_job.column_handlers import column_choices
from app.ui.new_job.form_layout import (FORM_FIELDS, FORM_INPUTS, FORM_LABELS, GRPO_AREAS,
                                        OTHER_OPTIONS, OTHER_OPTIONS_AREA, Place, area_rows,
                                        form_key, place_help, spec_location)
from app.ui.new_job.option_visibility import COLUMN_ROLES
from app.ui.new_job.typed_fields import (CHECKBOX, CHOICE, CHOICES, COLUMN, INTEGER, NUMBER,
                                         OPTIONAL_CHOICE, OPTIONAL_NUMBER, RADIO, SECTION_LIST,
                                         TEXT_LIST)
from tunedeck.data.file_formats import DATASET_FILE_SUFFIXES
from tunedeck.planner.shape_source import has_experts
from tunedeck.spec.fields import BACKEND_NAMES
from tunedeck.spec.job_spec import spec_field

# A text box's hint where the table gives none: what an empty one means, how to list.
DEFAULT_PLACEHOLDERS = {OPTIONAL_NUMBER: "empty: unset", TEXT_LIST: "comma-separated"}


@dataclass(frozen=True)
class NewJobForm:
    fields: dict[str, Any]  # the inputs, by FORM_FIELDS key
    # The option groups shown per choice ("lora", "dpo", "zero2", "fsdp"), the dataset
    # options' accordion ("dataset_options") and the column pickers' hint ("columns_hint"),
    # and the pieces beside the fields: the upload button and its answer, the suggestions,
    # the data check's button and panel, What LoRA adapts' button and answer.
    groups: dict[str, Any]

    @property
    def inputs(self) -> list:
        """The inputs in FORM_FIELDS order: every handler's `*values`."""
        return [self.fields[key] for key in FORM_FIELDS]


def build_input(place: Place, value: Any, *, visible: bool = True) -> Any:
    """A place's component: its kind's (typed_fields), labelled with its spec field's title,
    helped as form_layout.place_help says, its element id made from its key."""
    kind = FORM_INPUTS[place.key].kind
    choices = FORM_INPUTS[place.key].choices
    common = {"label": FORM_LABELS[place.key], "info": place_help(place), "visible": visible,
              "elem_id": f"new-job-{place.key.replace('_', '-')}"}
    if kind == CHECKBOX:
        return gr.Checkbox(value, **common)
    if kind in (INTEGER, NUMBER):
        return gr.Number(value, precision=0 if kind == INTEGER else None,
                         **({"step": place.step} if place.step else {}), **common)
    if kind == RADIO:
        return gr.Radio(_named_choices(place, choices), value=value, **common)
    if kind in (CHOICE, CHOICES):
        return gr.Dropdown(_named_choices(place, choices), value=value,
                           **({"multiselect": True} if kind == CHOICES else {}), **common)
    if kind == OPTIONAL_CHOICE:
        return gr.Dropdown([FORM_INPUTS[place.key].unset_choice, *choices], value=value,
                           **common)
    if kind == SECTION_LIST:
        return gr.Textbox(value, lines=3, max_lines=12, **common)
    if kind == COLUMN:  # the dataset's columns once it is read; any name can be typed
        return gr.Dropdown(column_choices(spec_location(place.key).split(".")[-1], []),
                           value=value, allow_custom_value=True, **common)
    return gr.Textbox(value, placeholder=place.placeholder or DEFAULT_PLACEHOLDERS.get(kind),
                      **common)


def scorer_list_html() -> str:
    """The rewards a spec may name, each with what it scores and its options (the scorer
    registry's own words, tunedeck/rewards/scorers.py)."""
    from tunedeck.rewards.scorers import SCORERS

    rows = []
    for scorer in SCORERS:
        name = scorer.model_fields["name"].annotation.__args__[0]
        options = ", ".join(f"<code>{option}</code>" for option, field in scorer.model_fields.items()
                            if option not in ("name", "weight"))
        rows.append(f"<li><code>{name}</code>: {html.escape(scorer.description)}"
                    + (f" (options: {options})" if options else "") + "</li>")
    return ('<div class="scorer-list"><small>Rewards you can name, each with <code>weight'
            f"</code> too:<ul>{''.join(rows)}</ul></small></div>")


def _named_choices(place: Place, choices: tuple[str, ...]) -> list:
    if place.choice_label is None:
        return list(choices)
    return [(place.choice_label(choice), choice) for choice in choices]


def build_area(area: str, defaults: Mapping[str, Any], fields: dict[str, Any], *,
               hidden: Collection[str] = (),
               beside: Mapping[str, Callable[[], None]] | None = None,
               row_ends: Mapping[int, Callable[[], None]] | None = None) -> None:
    """An area's places, a gr.Row each row, into `fields`. `beside` builds what sits under a
    field, in one column with it; `row_ends` what ends a row; `hidden` keys start hidden."""
    for row in area_rows(area):
        with gr.Row():
            for place in row:
                if place.key in (beside or {}):
                    with gr.Column():
                        fields[place.key] = build_input(place, defaults[place.key],
                                                        visible=place.key not in hidden)
                        beside[place.key]()
                else:
                    fields[place.key] = build_input(place, defaults[place.key],
                                                    visible=place.key not in hidden)
            (row_ends or {}).get(row[0].row, lambda: None)()


def build_form(defaults: Mapping[str, Any]) -> NewJobForm:
    """The form, area by area, top to bottom (form_layout.AREAS)."""
    fields: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    hidden = _hidden_at_first(defaults)
    build_area("data", defaults, fields, beside={"dataset": lambda: groups.update(_upload())})
    groups["suggestions"] = _suggestions()
    with gr.Accordion("Dataset config, split and columns", open=False,
                      elem_id="new-job-dataset-options") as groups["dataset_options"]:
        # The objective's columns only: sft's response and chat, or dpo's chosen and
        # rejected answers (the prompt and system prompt are both's).
        build_area("dataset options", defaults, fields, hidden=hidden)
        groups["columns_hint"] = gr.Markdown(elem_id="new-job-columns-hint")
    with gr.Row():
        groups["check_data"] = gr.Button("Check data", size="sm", elem_id="new-job-check-data")
    groups["check_data_result"] = gr.HTML(elem_id="new-job-check-data-result")
    build_area("name", defaults, fields)
    # What is learnt, right above how: SFT from examples, DPO from preference pairs (its
    # settings and the pairs' columns show once picked). One box, two rows: a fourth radio
    # does not fit the row of three at 1440 px (page_chrome's CSS keeps their options on one
    # line), and the objective's help would push its options below theirs.
    with gr.Group(elem_id="new-job-objective-and-method"):
        build_area("objective and method", defaults, fields)
    build_area("training", defaults, fields)
    with gr.Accordion("Evaluation, packing, checkpoints and export", open=False,
                      elem_id="new-job-more-options"):
        build_area("evaluation", defaults, fields)
    # The GPU speed options: liger and flash need a CUDA worker with liger-kernel or
    # flash-attn installed, which the worker checks before taking a GPU.
    with gr.Accordion("GPU speed", open=False, elem_id="new-job-speed-options"):
        build_area("speed", defaults, fields)
    groups.update(_option_groups(defaults, fields, hidden))
    if OTHER_OPTIONS:  # the top-level fields the table does not place, made from their types
        with gr.Accordion("Other options", open=False, elem_id="new-job-other-options"):
            build_area(OTHER_OPTIONS_AREA, defaults, fields)
    return NewJobForm(fields, groups)


def _hidden_at_first(defaults: Mapping[str, Any]) -> set[str]:
    """The inputs hidden for the form's first choices: the columns the objective does not
    read, and the expert options for a dense model (the tab shows or hides them as the
    objective and the model change)."""
    hidden = {form_key(f"columns.{role}") for role in COLUMN_ROLES
              if not option_visibility.column_visible(role, defaults["objective"])}
    if has_experts(defaults["model"]) is False:
        hidden |= {"lora_experts", "lora_train_router"}
    return hidden


def _option_groups(defaults: Mapping[str, Any], fields: dict[str, Any],
                   hidden: Collection[str]) -> dict[str, Any]:
    """The groups of options shown for the chosen method, objective and backend."""
    groups: dict[str, Any] = {}

    def lora_targets_button() -> None:  # at the end of the expert options' row
        groups["lora_targets_button"] = gr.Button("What LoRA adapts", size="sm",
                                                  elem_id="new-job-lora-targets-button")

    with gr.Group(visible=option_visibility.lora_options_visible(defaults["method"]),
                  elem_id="new-job-lora-options") as groups["lora"]:
        build_area("lora", defaults, fields, hidden=hidden, row_ends={2: lora_targets_button})
        groups["lora_targets"] = gr.Markdown(elem_id="new-job-lora-targets")
    # Each labelled and helped in the spec's words, as they say which loss reads them.
    with gr.Group(visible=option_visibility.preference_options_visible(defaults["objective"]),
                  elem_id="new-job-dpo-options") as groups["dpo"]:
        gr.Markdown(f"**{spec_field('dpo').title} (DPO) options**", padding=True)
        build_area("dpo", defaults, fields)
    # Online RL: sampling, the rewards (with the scorers they may name), the loss; a group
    # each (one would be too large a block for an event to show: test_layout_outputs.py).
    rl_shown = option_visibility.rl_options_visible(defaults["objective"])
    for area, heading in zip(GRPO_AREAS, (
            f"**{spec_field('grpo').title}**: sampling",
            "**Rewards**: a completion's reward is the weighted sum of these",
            "**Loss**, and the rollouts the job keeps")):
        key = area.replace(" ", "_")
        with gr.Group(visible=rl_shown, elem_id=f"new-job-{key.replace('_', '-')}-options") \
                as groups[key]:
            gr.Markdown(heading, padding=True)
            build_area(area, defaults, fields)
            if area == "grpo rewards":
                gr.HTML(scorer_list_html(), elem_id="new-job-grpo-scorers")
    # One group a backend, named as it is (backend_options_visible's order).
    for area, visible in zip(BACKEND_NAMES,
                             option_visibility.backend_options_visible(defaults["backend"])):
        with gr.Group(visible=visible, elem_id=f"new-job-{area}-options") as groups[area]:
            gr.Markdown(f"**{spec_field(area).title} options**", padding=True)
            build_area(area, defaults, fields)
    return groups


def _upload() -> dict[str, Any]:
    """The upload button under the dataset field it fills, and its answer. Browsers match a
    file type by its last suffix: ".gz" lets a .jsonl.gz file be chosen, and the upload
    refuses other .gz files by name."""
    file_types = sorted({"." + suffix.rsplit(".", 1)[-1] for suffix in DATASET_FILE_SUFFIXES})
    button = gr.UploadButton("Upload a dataset file", file_types=file_types, type="filepath",
                             size="sm", elem_id="new-job-dataset-upload")
    return {"upload_button": button, "upload_message": gr.Markdown(elem_id="new-job-upload-result")}


def _suggestions() -> dict[str, gr.Dropdown]:
    """Filled when opened (the user's own recent values, what the allowed folders hold); a
    pick is copied into the field above, which stays free text."""
    suggestions: dict[str, gr.Dropdown] = {}
    with gr.Row():
        for name, label in (("model", "Recent and available models"),
                            ("dataset", "Recent, uploaded and available datasets")):
            suggestions[name] = gr.Dropdown(
                [], value=None, label=label, info="pick one to fill the field above",
                elem_id=f"new-job-{name}-suggestions")
    return suggestions
