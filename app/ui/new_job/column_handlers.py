"""The New job form's column pickers: the dataset's column names to choose from, read
cheaply in the web process (tunedeck/data/columns.py, never the `datasets` library), and
only from a path the signed-in user may name."""
from __future__ import annotations

from app.auth.principal import Principal
from app.auth.spec_access import allowed_roots_for
from tunedeck.data.columns import peek_columns
from tunedeck.data.input_paths import is_local_reference, reference_problem
from tunedeck.data.records import columns_problem
from tunedeck.settings import Settings

# What an empty picker means, as its empty choice reads (an empty label drew as a bare tick):
# the usual names are looked for (instruction/output, prompt/response, messages; TYPE_THEM;
# for DPO, prompt/chosen/rejected), and no system prompt is added. Short: the pickers are
# narrow.
UNSET_COLUMN = {"prompt": "(usual names)", "response": "(usual names)",
                "messages": "(usual names)", "system": "(none)", "chosen": "(usual names)",
                "rejected": "(usual names)"}
TYPE_THEM = ("type the column names where they are not the usual ones (instruction/output, "
             "prompt/response or messages); the worker checks them before the job starts")


def dataset_column_choices(dataset: str | None, split: str | None, *, principal: Principal,
                           settings: Settings) -> tuple[list[str], str]:
    """(the dataset's column names, or none; a hint for the form)."""
    reference = (dataset or "").strip()
    if not reference or reference.startswith("builtin:"):
        return [], ""
    if not is_local_reference(reference):
        return [], f"A Hugging Face id: its columns are not read here; {TYPE_THEM}."
    # Checked first: the form must not open (or reveal) a file its user may not name.
    if reference_problem("dataset", reference, allowed_roots_for(principal, settings)):
        return [], ""
    try:
        names = peek_columns(reference, split=(split or "train").strip() or "train")
    except (OSError, ValueError) as error:
        return [], f"Its columns could not be read here ({type(error).__name__}); {TYPE_THEM}."
    if not names:
        return [], f"Its columns are not read here; {TYPE_THEM}."
    return names, f"Columns of this dataset: {', '.join(f'`{name}`' for name in names)}"


def column_choices(role: str, names: list[str]) -> list[tuple[str, str]]:
    """A column picker's choices: its empty value, labelled with what it means, then the
    dataset's column names."""
    return [(UNSET_COLUMN[role], ""), *((name, name) for name in names)]


def columns_to_choose(names: list[str], *, objective: str = "sft") -> bool:
    """Whether a dataset with these columns needs the pickers: none of the objective's
    usual shapes (prompt/response and the like for sft, prompt/chosen/rejected for dpo)."""
    return bool(names) and columns_problem(names, None, objective=objective) is not None
