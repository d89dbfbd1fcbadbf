"""Reading docker-compose.yml as Docker Compose would, without a Docker engine: the YAML
(anchors and merge keys included) and its `${VAR}` interpolation."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}; `$$` is a `$`.
_VARIABLE = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def variables_read_from_env_file() -> set[str]:
    """Names the compose file interpolates (what `.env` must be able to set)."""
    return {match["name"] for match in _VARIABLE.finditer(COMPOSE_FILE.read_text())
            if match["name"]}


def interpolate(value: str, variables: dict[str, str]) -> str:
    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, argument = match["name"], match["op"], match["arg"]
        is_set = name in variables and (variables[name] != "" or operator in (None, "-", "?"))
        if is_set:
            return variables[name]
        if operator and operator.endswith("?"):
            raise KeyError(f"{name}: {argument}")
        return argument if operator else ""

    return _VARIABLE.sub(substitute, value)


def service_environment(service: dict[str, Any], variables: dict[str, str]) -> dict[str, str]:
    """The `environment:` of a service (mapping or list form), interpolated."""
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: interpolate(str(value), variables) for key, value in environment.items()}
