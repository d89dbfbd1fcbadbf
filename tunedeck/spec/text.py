"""A job spec as text: YAML or JSON (a file, the API's body, `--set KEY=VALUE` on the
command line) read into the typed JobSpec, a spec written as the YAML a file would hold, and
a validation error written back as one line per problem, each naming its field, as the form,
the CLI and the worker say it."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tunedeck.spec.job_spec import JobSpec


def parse_spec_text(text: str, *, source: str = "spec", assignments: Sequence[str] = ()) -> JobSpec:
    """YAML or JSON text to a JobSpec (JSON is YAML, so one parser reads both), with each
    `KEY=VALUE` of `assignments` set first (tunedeck.spec.overrides)."""
    import yaml

    from tunedeck.spec.overrides import with_assignments

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{source}: not valid YAML or JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a mapping of spec keys, got {type(data).__name__}")
    return JobSpec.model_validate(with_assignments(data, assignments))


def load_spec_file(path: str | Path, *, assignments: Sequence[str] = ()) -> JobSpec:
    path = Path(path)
    return parse_spec_text(path.read_text(encoding="utf-8"), source=str(path),
                           assignments=assignments)


def spec_as_yaml(spec: JobSpec) -> str:
    """The spec as the YAML `tunedeck submit` reads back to the same spec: only the fields
    that differ from their defaults, in the spec's order. Short enough to read and edit; the
    defaults are the spec's own wherever it is read, and a submitted job stores the whole."""
    import yaml

    return yaml.safe_dump(spec.model_dump(mode="json", exclude_defaults=True), sort_keys=False,
                          allow_unicode=True)


def format_validation_error(error: Exception) -> str:
    """One line per problem, each naming its field, for the form and the CLI."""
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return str(error)
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{field}: {message}")
    return "\n".join(lines)
