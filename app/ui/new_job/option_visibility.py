"""Which of the New job form's option groups show for the chosen objective, backend and
method, which of the form's fields go into the spec for them, and what picking an objective
changes beyond what it shows."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunedeck.spec.fields import BACKEND_NAMES
from tunedeck.spec.sections import ColumnMapping

METHODS_WITH_ADAPTER = ("lora", "qlora")
# The spec's `columns` fields. An objective reads some of them: sft a prompt and its response
# (or a chat), dpo a prompt with a chosen and a rejected answer; the prompt (and system) both.
COLUMN_ROLES = tuple(ColumnMapping.model_fields)
OBJECTIVE_COLUMN_ROLES = {"sft": ("prompt", "response", "messages", "system"),
                          "dpo": ("prompt", "system", "chosen", "rejected")}


# Each objective's built-in dataset: a newcomer's first DPO click must find pairs to read.
BUILTIN_DATASET_OF = {"sft": "builtin:arithmetic", "dpo": "builtin:arithmetic-preference"}


@dataclass(frozen=True)
class ObjectiveSwitch:
    """What picking an objective changes in the form beyond what it shows (None: leave it)."""

    dataset: str | None = None
    packing: bool | None = None
    padding_free: bool | None = None


def objective_picked(objective: str, dataset: str | None, packing: bool,
                     padding_free: bool) -> ObjectiveSwitch:
    """The other objective's built-in dataset becomes this one's (a dataset the user named
    stays); dpo turns packing and padding-free off (a pair's answers are rows of their own)."""
    others = {name for key, name in BUILTIN_DATASET_OF.items() if key != objective}
    wanted = BUILTIN_DATASET_OF.get(objective)
    dataset = wanted if wanted and (dataset or "").strip() in others else None
    if objective != "dpo":
        return ObjectiveSwitch(dataset)
    return ObjectiveSwitch(dataset, False if packing else None,
                           False if padding_free else None)


def objective_options_visible(objective: str) -> tuple[bool, ...]:
    """Show the preference settings; then each column picker, in COLUMN_ROLES' order."""
    return (preference_options_visible(objective),
            *(column_visible(role, objective) for role in COLUMN_ROLES))


def preference_options_visible(objective: str) -> bool:
    return objective == "dpo"


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
    if section == "columns":
        return column_visible(name, form["objective"])
    return True
