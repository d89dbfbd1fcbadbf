"""What is specific to one training backend is written in its own module (tunedeck/backends/):
no code elsewhere compares a backend's name (`spec.backend == "zero2"`, `backend in
("fsdp", ...)`, `strategy.startswith("fsdp")`); it asks the backend object instead
(`backend_of(spec)`, `BACKENDS[name]`), so adding a backend or changing what one needs is
an edit of its module."""
from __future__ import annotations

import ast
from pathlib import Path

from tunedeck.backends import BACKENDS

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "tunedeck", "cli", "worker", "trainer", "scripts", "bench", "harness", "docker")
BACKENDS_HOME = REPO / "tunedeck" / "backends"


def _names_a_backend(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):  # a backend, or one of its planner set-ups
        return isinstance(node.value, str) and node.value.removesuffix("_offload") in BACKENDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_backend(item) for item in node.elts)
    return False


def backend_name_comparisons(source: str) -> list[int]:
    """The lines of `source` that compare something with a backend's name."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
                _names_a_backend(operand) for operand in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith", "removeprefix") \
                and any(_names_a_backend(argument) for argument in node.args):
            lines.append(node.lineno)
    return lines


def backend_names_held(source: str) -> list[int]:
    """The lines of `source` that hold a backend's name at all: a dict keyed by it, a tuple
    of them to loop over, as well as a comparison."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Constant) and _names_a_backend(node)})


# The planner's byte counts ask each backend (Backend.state_bytes_per_rank) what a rank
# holds under it: these modules hold no backend's name, not even as a key or a row.
PLANNER_COUNTING = ("tunedeck/planner/memory_plan.py", "tunedeck/planner/setups.py",
                    "tunedeck/planner/step_cost.py")


def test_the_rule_finds_each_way_of_comparing_a_backend_name():
    found = backend_name_comparisons(
        'a = spec.backend == "zero2"\nb = "fsdp" != name\nc = name in ("fsdp", "x")\n'
        'd = strategy.startswith("zero2")\ne = {"zero2": 1}\nf = spec.backend == other\n'
        'g = strategy == "fsdp_offload"\n')
    assert found == [1, 2, 3, 4, 7]


def test_no_backend_name_is_compared_outside_its_module():
    offenders = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.is_relative_to(BACKENDS_HOME):
                continue
            offenders += [f"{path.relative_to(REPO)}:{line}"
                          for line in backend_name_comparisons(path.read_text())]
    assert offenders == []


def test_the_planner_rule_finds_a_name_held_as_a_key_or_a_row():
    found = backend_names_held(
        'plans = {"zero2": 1}\nfor name in ("ddp", "fsdp_offload"):\n    pass\n'
        'x = "zero2 words"\ny = spec.backend\nz = name == "fsdp"\n')
    assert found == [1, 2, 6]


def test_the_planner_counts_bytes_without_naming_a_backend():
    offenders = [f"{module}:{line}" for module in PLANNER_COUNTING
                 for line in backend_names_held((REPO / module).read_text())]
    assert offenders == []
