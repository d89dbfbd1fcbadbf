"""Which of the New job form's option groups show for the chosen objective, backend and
method, and what picking an objective changes beyond what it shows."""
from __future__ import annotations

from dataclasses import dataclass

from app.ui.new_job.form_labels import COLUMN_ROLES, OBJECTIVE_COLUMN_ROLES
from tunedeck.spec.fields import BACKEND_NAMES

METHODS_WITH_ADAPTER = ("lora", "qlora")


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
    shown = OBJECTIVE_COLUMN_ROLES.get(objective, COLUMN_ROLES)
    return objective == "dpo", *(role in shown for role in COLUMN_ROLES)


def backend_options_visible(backend: str) -> tuple[bool, ...]:
    """For each backend, in BACKEND_NAMES' order (ZeRO-2, FSDP): show its options."""
    return tuple(name == backend for name in BACKEND_NAMES)


def lora_options_visible(method: str) -> bool:
    return method in METHODS_WITH_ADAPTER
