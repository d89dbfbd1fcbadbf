"""The New job form's fields made from the spec's own types: each top-level spec field the
form neither lays out by hand (form_labels.LAID_OUT_FIELDS) nor leaves out
(form_labels.LEFT_OUT) gets one, in the form's "Other options" section, so a new spec field
shows and submits with no form edit. Plain values here (the tab builds the components):
what kind of input a field's type takes, and its value each way."""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo

# A field's kind -> the component the tab builds for it (new_job_fields._typed_component).
CHECKBOX, INTEGER, NUMBER, OPTIONAL_NUMBER = "checkbox", "integer", "number", "optional_number"
CHOICE, CHOICES, TEXT, OPTIONAL_TEXT, TEXT_LIST = ("choice", "choices", "text", "optional_text",
                                                   "text_list")


@dataclass(frozen=True)
class TypedField:
    name: str
    kind: str
    choices: tuple[str, ...] = ()
    integer: bool = False  # an optional number's: whole numbers only

    def to_form(self, value: Any) -> Any:
        """The spec's value as the component shows it."""
        if self.kind == TEXT_LIST:
            return ", ".join(value)
        if self.kind == CHOICES:
            return list(value)
        if self.kind == OPTIONAL_TEXT:
            return value or ""
        if self.kind == OPTIONAL_NUMBER:  # a text box: Gradio draws an empty number as 0
            return "" if value is None else f"{value:g}"
        return value

    def to_spec(self, value: Any) -> Any:
        """The component's value as the spec's JSON; what cannot be read is passed on as
        typed, for the spec to refuse by name."""
        if self.kind == CHECKBOX:
            return bool(value)
        if self.kind == TEXT_LIST:  # comma-separated; spaces around each item dropped
            return [item.strip() for item in (value or "").split(",") if item.strip()]
        if self.kind == CHOICES:  # a multiselect answers None when emptied
            return list(value or [])
        if self.kind == TEXT:
            return (value or "").strip()
        if self.kind == OPTIONAL_TEXT:
            return (value or "").strip() or None
        if self.kind == OPTIONAL_NUMBER:
            return number_or_none(value, integer=self.integer)
        return value


def typed_field(name: str, field: FieldInfo) -> TypedField | None:
    """The form field a spec field's type makes, or None for a type with no plain input (a
    section, a union of kinds): such a field is laid out by hand or left out."""
    annotation, optional = _without_none(field.annotation)
    origin, arguments = get_origin(annotation), get_args(annotation)
    if annotation is bool and not optional:
        return TypedField(name, CHECKBOX)
    if annotation in (int, float):
        return TypedField(name, OPTIONAL_NUMBER if optional else
                          INTEGER if annotation is int else NUMBER, integer=annotation is int)
    if origin is Literal and not optional:
        return TypedField(name, CHOICE, tuple(map(str, arguments)))
    if annotation is str:
        return TypedField(name, OPTIONAL_TEXT if optional else TEXT)
    if origin is list and len(arguments) == 1 and not optional:
        item = arguments[0]
        if item is str:
            return TypedField(name, TEXT_LIST)
        if get_origin(item) is Literal:
            return TypedField(name, CHOICES, tuple(map(str, get_args(item))))
    return None


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
