"""No import cycles between the project's modules (cryopg/ and agent/).

Every import statement counts, wherever it sits: a function-level (lazy) import or one
under `if TYPE_CHECKING:` only hides a cycle until the day someone moves it to the top.
Importing `a.b.c` counts as an edge to `a.b.c` alone: the implicit import of its parent
packages is how packages work, not a loop.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cryopg", "agent")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom,
             modules: dict[str, Path]) -> Iterator[str]:
    """The project modules one import statement loads."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in modules:
                yield alias.name
        return
    if node.level:  # relative: resolve against this module's package
        package = name.split(".") if _is_package(path) else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    for alias in node.names:
        child = f"{base}.{alias.name}"
        if child in modules:  # `from pkg import module`
            yield child
        elif base in modules:  # `from module import name`
            yield base


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_targets(name, path, node, modules))
        graph[name] = edges
    return graph


def _cycle_in(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """One concrete cycle through a strongly connected component, for the message."""
    start = min(members)
    parent: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return [start, start]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components; each with a loop gives one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members: set[str] = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.add(top)
                if top == node:
                    break
            if len(members) > 1 or node in graph[node]:
                cycles.append(_cycle_in(graph, members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_graph_sees_the_modules() -> None:
    graph = import_graph()
    assert "cryopg.cli.inscript" in graph and "agent.socket_server" in graph
    assert "cryopg.cli.lean" in graph["cryopg.cli.inscript_client"]


def test_finder_reports_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
