"""No import circles in the product: the modules of tunedeck, app, worker, trainer, cli and
migrations, joined by every import they make (at module level and inside functions alike,
since a lazy import is a dependency that only waits), form no strongly connected component
of more than one module.

An import under `if TYPE_CHECKING:` names a type and runs nothing, so it is left out. An
edge goes to the module an import names: `from a.b import c` points at a/b/c.py when that is
a module, else at a/b (its __init__.py); the packages a running import passes through on the
way are the packaging, not a dependency, and are not edges.
"""
from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("tunedeck", "app", "worker", "trainer", "cli", "migrations")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PRODUCT
            for path in sorted((REPO / package).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST):
    """Every import under `node`, at any depth, but none in an `if TYPE_CHECKING:` body."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes(ast.Module(body=[other], type_ignores=[]))
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from _import_nodes(child)


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importing module's package, up level - 1
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """{module: {imported product module: the line of its first import}}."""
    def target(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            for name in _imported_names(node, module, path.name == "__init__.py"):
                imported = target(name)
                if imported is not None and imported != module:
                    edges.setdefault(imported, node.lineno)
        graph[module] = edges
    return graph


def strongly_connected_components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm, without recursion (the graph is a few hundred modules deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(graph[successor])))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def shortest_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest way from the component's first module back to itself, inside it."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in graph[node]:
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if successor in members and successor not in came_from:
                came_from[successor] = node
                queue.append(successor)
    return component


def cycle_text(graph: dict[str, dict[str, int]], modules: dict[str, Path],
               component: list[str]) -> str:
    cycle = shortest_cycle(graph, component)
    steps = [f"  {importer} -> {imported} "
             f"({modules[importer].relative_to(REPO)}:{graph[importer][imported]})"
             for importer, imported in zip(cycle, cycle[1:])]
    return "\n".join([f"{len(component)} modules in a circle: {', '.join(component)}", *steps])


def test_the_graph_sees_imports_inside_functions_but_not_type_checking_ones():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\n"
              "else:\n    import c\ndef f():\n    from d import x\n")
    names = [name for node in _import_nodes(ast.parse(source))
             for name in _imported_names(node, "a", False)]
    assert sorted(names) == ["c", "d.x", "typing.TYPE_CHECKING"]


def test_strongly_connected_components_find_a_circle_and_leave_a_chain():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert sorted(strongly_connected_components(graph)) == [["a", "b", "c"], ["d"]]
    assert shortest_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_the_product_has_no_import_cycles():
    modules = product_modules()
    graph = import_graph(modules)
    assert len(graph) > 300 and any(graph.values())  # it read the product, and its imports
    circles = [component for component in strongly_connected_components(graph)
               if len(component) > 1]
    for component in circles:
        print(cycle_text(graph, modules, component))
    assert not circles, "\n\n".join(cycle_text(graph, modules, component)
                                    for component in circles)
