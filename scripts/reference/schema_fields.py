"""JSON schemas as table cells, for job-spec.md and http-api.md alike: a schema's short type
(with links to the models it refers to), its constraints and its default."""
from __future__ import annotations

import json
from typing import Any

from .markdown import code


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def schema_type(schema: dict[str, Any], link) -> str:
    """A JSON schema as a short type: `integer`, `"a"` or `"b"`, [LoraSettings](#...)."""
    if "$ref" in schema:
        return link(ref_name(schema["$ref"]))
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        return " or ".join(code(json.dumps(value)) for value in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(schema_type(branch, link) for branch in schema["anyOf"])
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return schema_type(schema["allOf"][0], link)
    kind = schema.get("type")
    if kind == "array":
        return f"list of {schema_type(schema.get('items', {}), link)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {schema_type(schema['additionalProperties'], link)}"
    if kind == "null":
        return "null"
    return kind or "any"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def schema_constraints(schema: dict[str, Any]) -> str:
    parts: list[str] = []
    for branch in [schema, *schema.get("anyOf", [])]:
        for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"),
                          ("maximum", "≤"), ("exclusiveMaximum", "<")):
            if key in branch:
                parts.append(f"{sign} {_number(branch[key])}")
        if "minLength" in branch or "maxLength" in branch:
            low, high = branch.get("minLength", 0), branch.get("maxLength")
            parts.append(f"{low}–{high} characters" if high is not None
                         else f"at least {low} characters")
        if "pattern" in branch:
            parts.append("matches " + code(branch["pattern"]))
    return ", ".join(dict.fromkeys(parts))


def schema_default(schema: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in schema:
        return "—"
    default = schema["default"]
    if "$ref" in schema and isinstance(default, dict):
        return "its fields' defaults"
    return code(json.dumps(default))
