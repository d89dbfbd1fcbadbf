"""Which of the New job form's option groups show for the chosen objective, backend and
method, which of the form's fields go into the spec for them, and what picking an objective
changes beyond what it shows."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tunedeck.spec.fields import BACKEND_NAMES
from tunedeck.spec.sections import ColumnMapping

METHODS_WITH_ADAPTER = ("lora", "qlora")
# The spec's `columns` fields. An objective reads some of them: sft a prompt and its response
# (or a chat), dpo a prompt with a chosen and a rejected answer; the prompt (and system) both.
COLUMN_ROLES = tuple(ColumnMapping.model_fields)
OBJECTIVE_COLUMN_ROLES = {"sft": ("prompt", "response", "messages", "system"),
                          "dpo": ("prompt", "system", "chosen", "rejected"),
                          "grpo": ("prompt", "messages", "system")}


# Each objective's built-in dataset: a newcomer's first DPO click must find pairs to read.
BUILTIN_DATASET_OF = {"sft": "builtin:arithmetic", "dpo": "builtin:arithmetic-preference",
                      "grpo": "builtin:arithmetic-rl"}
# Room a prompt keeps beside a GRPO completion when picking GRPO must raise seq_len.
GRPO_PROMPT_ROOM = 256


@dataclass(frozen=True)
class ObjectiveSwitch:
    """What picking an objective changes in the form beyond what it shows (None: leave it)."""

    dataset: str | None = None
    packing: bool | None = None
    padding_free: bool | None = None
    micro_batch_size: int | None = None
    seq_len: int | None = None


def objective_picked(objective: str, dataset: str | None, packing: bool, padding_free: bool,
                     form: Mapping[str, Any] | None = None) -> ObjectiveSwitch:
    """The other objective's built-in dataset becomes this one's (a dataset the user named
    stays); dpo and grpo turn packing and padding-free off (an answer, a completion, is a row
    of its own); grpo also takes a micro-batch of whole groups (micro_batch_size a multiple
    of grpo.num_generations) and a seq_len with room for a prompt beside the longest
    completion, where the form's do not fit, so a first GRPO click makes a valid spec."""
    others = {name for key, name in BUILTIN_DATASET_OF.items() if key != objective}
    wanted = BUILTIN_DATASET_OF.get(objective)
    dataset = wanted if wanted and (dataset or "").strip() in others else None
    if objective == "sft":
        return ObjectiveSwitch(dataset)
    switch = ObjectiveSwitch(dataset, False if packing else None, False if padding_free else None)
    if objective != "grpo" or form is None:
        return switch
    generations = _whole(form.get("grpo_num_generations"))
    completion = _whole(form.get("grpo_max_completion_length"))
    size, accumulation = _whole(form.get("micro_batch_size")), _whole(form.get("grad_accum")) or 1
    seq_len = _whole(form.get("seq_len"))
    if generations and size and (size * accumulation) % generations:
        switch = replace(switch, micro_batch_size=generations)
    if completion and seq_len and seq_len <= completion:
        switch = replace(switch, seq_len=completion + GRPO_PROMPT_ROOM)
    return switch


def _whole(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def objective_options_visible(objective: str) -> tuple[bool, ...]:
    """Show the preference settings, the RL settings; then each column picker, in
    COLUMN_ROLES' order."""
    return (preference_options_visible(objective), rl_options_visible(objective),
            *(column_visible(role, objective) for role in COLUMN_ROLES))


def preference_options_visible(objective: str) -> bool:
    return objective == "dpo"


def rl_options_visible(objective: str) -> bool:
    return objective == "grpo"


def column_visible(role: str, objective: str) -> bool:
    return role in OBJECTIVE_COLUMN_ROLES.get(objective, COLUMN_ROLES)


def backend_options_visible(backend: str) -> tuple[bool, ...]:
    """For each backend, in BACKEND_NAMES' order (ZeRO-2, FSDP): show its options."""
    return tuple(name == backend for name in BACKEND_NAMES)


def lora_options_visible(method: str) -> bool:
    return method in METHODS_WITH_ADAPTER


def location_sent(location: str, form: Mapping[str, Any]) -> bool:
    """Whether a form field goes into the spec: a hidden LoRA, preference or column field
    is left out, so it never blocks the spec (a LoRA rank of 0 under method full) nor stays
    behind in it once the objective switches back. Both backend sections are sent, shown or
    not: each backend reads only its own, and a spec that sets the other's round-trips."""
    section, _, name = location.rpartition(".")
    if section == "lora":
        return lora_options_visible(form["method"])
    if section == "dpo":
        return preference_options_visible(form["objective"])
    if section == "grpo":
        return rl_options_visible(form["objective"])
    if section == "columns":
        return column_visible(name, form["objective"])
    return True
