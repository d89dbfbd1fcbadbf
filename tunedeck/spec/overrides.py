"""`tunedeck submit SPEC.yaml --set lora.r=16 --set max_steps=50`: fields of a spec file
changed from the command line, on the file's mapping before the one JobSpec validates it
(so a wrong key or value is refused as it would be in the file, naming the key)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def parse_assignment(assignment: str) -> tuple[list[str], Any]:
    """"lora.r=16" -> (["lora", "r"], 16). The value is read as JSON, else YAML: a number,
    true/false, null, a [list]; what neither reads (or reads as a mapping) is the text."""
    key, equals, text = assignment.partition("=")
    path = key.strip().split(".")
    if not equals or not all(path):
        raise ValueError(f"--set {assignment}: expected KEY=VALUE, a section's field as "
                         "SECTION.FIELD (lora.r=16)")
    return path, _value_of(text)


def _value_of(text: str) -> Any:
    # JSON first: YAML 1.1 reads "3e-4" as text where JSON reads a number.
    import yaml

    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    # "a: b" is text here; a section's fields are set one by one (lora.r=16).
    return text if isinstance(value, dict) else value


def with_assignments(data: dict[str, Any], assignments: Sequence[str]) -> dict[str, Any]:
    """A copy of the spec file's mapping with each `KEY=VALUE` set, in order."""
    changed = dict(data)
    for assignment in assignments:
        path, value = parse_assignment(assignment)
        section = changed
        for depth, part in enumerate(path[:-1]):
            inner = section.get(part, {})
            if not isinstance(inner, dict):
                raise ValueError(f"--set {assignment}: {'.'.join(path[:depth + 1])} is not a "
                                 "section (it holds a value, not fields)")
            section[part] = inner = dict(inner)
            section = inner
        section[path[-1]] = value
    return changed
