"""The front-ends only translate: every change a user can make goes through app/actions,
which checks access, acts and audits in one place. So no REST router, UI handler or CLI
command writes a job row or an audit record itself (a front-end that did could forget the
access check)."""
import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The CLI too: its account commands act through app/actions/accounts.py.
FRONT_ENDS = ["app/api", "app/ui", "cli"]
READS = ("get_", "list_", "latest_", "count_")


def _attribute_calls(path: Path, owner: str) -> set[str]:
    """`owner.name(...)` calls in the module."""
    return {node.func.attr for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == owner}


def _imported_names(path: Path, module: str) -> set[str]:
    return {alias.name for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module == module
            for alias in node.names}


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_front_ends_only_read_job_rows(front_end):
    writes = {str(path.relative_to(REPO)): sorted(
                  name for name in _attribute_calls(path, "job_store")
                  | _imported_names(path, "tunedeck.jobs.store")
                  if not name.startswith(READS) and not name.isupper())
              for path in (REPO / front_end).rglob("*.py")}
    assert not {path: names for path, names in writes.items() if names}


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_front_ends_write_no_audit_record(front_end):
    for path in (REPO / front_end).rglob("*.py"):
        assert "record" not in _attribute_calls(path, "audit"), path
        assert "record" not in _imported_names(path, "tunedeck.accounts.audit"), path
