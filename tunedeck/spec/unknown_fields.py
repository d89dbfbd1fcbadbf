"""The error for a key a strict model does not have. Pydantic's own, "Extra inputs are not
permitted", names neither what the key is nor what it was meant to be; this one says
"unknown field `lr`; did you mean `learning_rate`?". The spec's models raise it
(tunedeck.spec.sections.StrictModel), so a spec file, `tunedeck submit --set`, the HTTP
API's 422 and the form all say the same."""
from __future__ import annotations

import difflib
from collections.abc import Iterable

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

UNKNOWN_FIELD = "extra_forbidden"  # pydantic's own type, kept for clients that test it


def closest_field(name: str, fields: Iterable[str]) -> str | None:
    """The field `name` was most likely meant to be: one whose words it abbreviates
    (`lr`: `learning_rate`, difflib sees little alike there), else the closest spelling."""
    fields = list(fields)
    typed = name.lower()
    for field in fields:
        if "_" in field and "".join(word[:1] for word in field.split("_")) == typed:
            return field
    close = difflib.get_close_matches(typed, fields, n=1)
    return close[0] if close else None


def unknown_field_error(name: str, fields: Iterable[str]) -> PydanticCustomError:
    suggestion = closest_field(name, fields)
    if suggestion is None:
        return PydanticCustomError(UNKNOWN_FIELD, "unknown field `{field}`", {"field": name})
    return PydanticCustomError(UNKNOWN_FIELD, "unknown field `{field}`; did you mean "
                               "`{suggestion}`?", {"field": name, "suggestion": suggestion})


def with_unknown_fields_named(error: ValidationError, fields: Iterable[str]) -> ValidationError:
    """`error` with each of this model's own unknown keys (a location of one part: a
    section's are named by the section's model) said as `unknown_field_error` says it."""
    fields = list(fields)
    problems = error.errors()
    if not any(_unnamed_unknown_key(problem) for problem in problems):
        return error
    details = []
    for problem in problems:
        if _unnamed_unknown_key(problem):
            kind = unknown_field_error(str(problem["loc"][0]), fields)
        elif problem["type"] == UNKNOWN_FIELD:  # a section's, named already: keep its words
            kind = PydanticCustomError(UNKNOWN_FIELD, problem["msg"], problem.get("ctx"))
        else:
            kind = problem["type"]
        detail = {"type": kind, "loc": problem["loc"], "input": problem["input"]}
        if isinstance(kind, str) and "ctx" in problem:
            detail["ctx"] = problem["ctx"]
        details.append(detail)
    return ValidationError.from_exception_data(error.title, details)


def _unnamed_unknown_key(problem) -> bool:
    return (problem["type"] == UNKNOWN_FIELD and len(problem["loc"]) == 1
            and "ctx" not in problem)
