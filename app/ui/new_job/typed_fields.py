"""The New job form's inputs as their spec fields' types make them: what kind of input a type
takes (a checkbox for a bool, a dropdown for a Literal, ...), and its value each way. Plain
values here: form_layout.py says where each input sits (and, for a few, a kind other than the
type's), form_fields.py builds the components."""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo

# A field's kind -> the component form_fields.build_input builds for it.
CHECKBOX, INTEGER, NUMBER, OPTIONAL_NUMBER = "checkbox", "integer", "number", "optional_number"
CHOICE, CHOICES, TEXT, OPTIONAL_TEXT, TEXT_LIST = ("choice", "choices", "text", "optional_text",
                                                   "text_list")
# An optional Literal: a dropdown whose first choice leaves it unset.
OPTIONAL_CHOICE = "optional_choice"
# A list of sections picked by a name (grpo.rewards: `{name, weight, ...options}` each):
# YAML in a text box, an item a line.
SECTION_LIST = "section_list"
# Kinds only a layout line names, each reading its values as the kind it stands for: RADIO
# as CHOICE (a few choices, all in sight), COLUMN as OPTIONAL_TEXT (a dataset column
# picker that takes any typed name).
RADIO, COLUMN = "radio", "column"
UNSET_CHOICE = "unset"


@dataclass(frozen=True)
class TypedField:
    name: str  # the form's key
    kind: str
    choices: tuple[str, ...] = ()
    integer: bool = False  # an optional number's: whole numbers only
    unset_choice: str = UNSET_CHOICE  # an optional choice's entry that leaves it unset
    # What an emptied input means beyond its kind's reading: the field's own default (a
    # split, a count whose default is 0) ...
    empty_is_default: bool = False
    default: Any = None
    # ... or, for a training length, unset where 0 is typed too (set max_steps or epochs).
    zero_is_unset: bool = False

    def to_form(self, value: Any) -> Any:
        """The spec's value as the component shows it."""
        if self.kind == TEXT_LIST:
            return ", ".join(value)
        if self.kind == CHOICES:
            return list(value)
        if self.kind in (OPTIONAL_TEXT, COLUMN):
            return value or ""
        if self.kind == OPTIONAL_NUMBER:  # a text box: Gradio draws an empty number as 0
            return "" if value is None else f"{value:g}"
        if self.kind == OPTIONAL_CHOICE:
            return self.unset_choice if value is None else value
        if self.kind == SECTION_LIST:
            return section_list_text(value)
        return value

    def to_spec(self, value: Any) -> Any:
        """The component's value as the spec's JSON; what cannot be read is passed on as
        typed, for the spec to refuse by name."""
        read = self._read(value)
        if self.zero_is_unset and not read:
            return None
        if self.empty_is_default and read in (None, ""):
            return self.default
        return read

    def _read(self, value: Any) -> Any:
        if self.kind == CHECKBOX:
            return bool(value)
        if self.kind == TEXT_LIST:  # comma-separated; spaces around each item dropped
            return [item.strip() for item in (value or "").split(",") if item.strip()]
        if self.kind == CHOICES:  # a multiselect answers None when emptied
            return list(value or [])
        if self.kind == TEXT:
            return (value or "").strip()
        if self.kind in (OPTIONAL_TEXT, COLUMN):
            return (value or "").strip() or None
        if self.kind == OPTIONAL_NUMBER:
            return number_or_none(value, integer=self.integer)
        if self.kind == OPTIONAL_CHOICE:
            return None if value == self.unset_choice else value
        if self.kind == SECTION_LIST:
            return section_list_value(value)
        return value


def typed_field(name: str, field: FieldInfo) -> TypedField | None:
    """The form field a spec field's type makes, or None for a type with no plain input (a
    section, a union of kinds): such a field is left out of the form, by name."""
    annotation, optional = _without_none(field.annotation)
    origin, arguments = get_origin(annotation), get_args(annotation)
    if annotation is bool and not optional:
        return TypedField(name, CHECKBOX)
    if annotation in (int, float):
        return TypedField(name, OPTIONAL_NUMBER if optional else
                          INTEGER if annotation is int else NUMBER, integer=annotation is int)
    if origin is Literal:
        return TypedField(name, OPTIONAL_CHOICE if optional else CHOICE,
                          tuple(map(str, arguments)))
    if annotation is str:
        return TypedField(name, OPTIONAL_TEXT if optional else TEXT)
    if origin is list and len(arguments) == 1 and not optional:
        item = arguments[0]
        if item is str:
            return TypedField(name, TEXT_LIST)
        if get_origin(item) is Literal:
            return TypedField(name, CHOICES, tuple(map(str, get_args(item))))
        if _is_section_union(item):
            return TypedField(name, SECTION_LIST)
    return None


def _is_section_union(item: Any) -> bool:
    """`Annotated[Union[ModelA, ModelB, ...], Field(discriminator=...)]`: sections picked by
    a name (the rewards' scorers)."""
    from pydantic import BaseModel

    if get_origin(item) is Annotated:
        item = get_args(item)[0]
    members = get_args(item) if get_origin(item) in (Union, types.UnionType) else ()
    return bool(members) and all(isinstance(member, type) and issubclass(member, BaseModel)
                                 for member in members)


def section_list_text(value: Any) -> str:
    """The list as YAML, one `- {name: ..., option: ...}` line an item, options at their
    defaults left out (the spec's JSON, or its models)."""
    import yaml

    items = [item.model_dump(mode="json", exclude_defaults=True) | {"name": item.name}
             if hasattr(item, "model_dump") else item for item in value or []]
    items = [{"name": item["name"], **{key: item[key] for key in item if key != "name"}}
             if isinstance(item, dict) and "name" in item else item for item in items]
    return "".join(yaml.safe_dump([item], default_flow_style=None, sort_keys=False,
                                  width=10_000, allow_unicode=True) for item in items)


def section_list_value(text: Any) -> Any:
    """The YAML list read back; text that is not YAML is passed on as typed, for the spec
    to refuse by name."""
    import yaml

    if not isinstance(text, str):
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return [] if value is None else value


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """(`X`, True) for `X | None`; (the annotation, False) otherwise."""
    if get_origin(annotation) in (Union, types.UnionType):
        kept = [argument for argument in get_args(annotation) if argument is not type(None)]
        if len(kept) == 1 and len(kept) < len(get_args(annotation)):
            return kept[0], True
    return annotation, False


def number_or_none(value: Any, *, integer: bool) -> Any:
    """A number typed in a text box: None when empty, else the number, or the text as typed."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if integer and number.is_integer() else number
