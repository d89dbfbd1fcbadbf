"""One import path for each name: `from M import name` takes `name` from the module that
defines it (a function, a class, an assignment, or a submodule of a package), never from a
module that only imported it, and no product module keeps a re-export list (`__all__`).
A name with two paths drifts: one day the two are different objects."""
from __future__ import annotations

import ast
import functools
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("tunedeck", "app", "worker", "trainer", "cli", "migrations", "harness")
# Every file that imports from the product: the product, its tests, benches and scripts.
IMPORTERS = (*PRODUCT, "tests", "bench", "scripts")


def module_file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


@functools.cache
def defined_names(module: str) -> frozenset[str]:
    """The names a module binds at its top level other than by importing them."""
    tree = ast.parse(module_file(module).read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(name.id for target in targets for name in ast.walk(target)
                         if isinstance(name, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            # A name bound in a guarded block (a fallback definition) is still defined here.
            names.update(name.id for inner in ast.walk(node) if isinstance(inner, ast.Assign)
                         for target in inner.targets for name in ast.walk(target)
                         if isinstance(name, ast.Name))
            names.update(inner.name for inner in ast.walk(node) if isinstance(
                inner, (ast.FunctionDef, ast.ClassDef)))
    return frozenset(names)


def tracked_python_files(*folders: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--", *(f"{folder}/*.py" for folder in folders)],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in listed.split() if (REPO / name).is_file()]


def second_hand_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.split(".")[0] in PRODUCT and module_file(node.module)):
            continue
        for alias in node.names:
            if module_file(f"{node.module}.{alias.name}") is None \
                    and alias.name not in defined_names(node.module):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: "
                             f"{alias.name} from {node.module}, which only imports it")
    return found


def test_every_name_is_imported_from_the_module_that_defines_it():
    found = [line for path in tracked_python_files(*IMPORTERS)
             for line in second_hand_imports(path)]
    assert not found, "\n".join(found)


def test_no_product_module_keeps_a_re_export_list():
    lists = [str(path.relative_to(REPO)) for path in tracked_python_files(*PRODUCT)
             if any(isinstance(node, ast.Assign) and any(
                 isinstance(target, ast.Name) and target.id == "__all__"
                 for target in node.targets) for node in ast.parse(path.read_text()).body)]
    assert not lists, lists
