"""No import cycle anywhere in the two packages, npudure/ and workshop/npudure_workshop/ (a cycle may
cross from one to the other): a module graph built with ``ast`` from every import statement
(top-level or inside functions, ``TYPE_CHECKING`` blocks included), searched for a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "npudure", ROOT / "workshop" / "npudure_workshop")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(*roots: Path) -> dict[str, set[str]]:
    """module -> modules of the packages it imports. ``from a import b`` counts as importing ``a.b``
    when ``a.b`` is a module, else ``a``. A package's ``__init__`` is not implied by its submodules:
    only an explicit import of the package counts as an edge to it."""
    files = {_module_name(p, root): p for root in roots for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    if sub in files:
                        edges.add(sub)
                    elif module in files:
                        edges.add(module)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(*PACKAGES)
    assert {
        "npudure.agent.server",
        "npudure_workshop.bench.session",
        "npudure_workshop.bench.experiments.sweep",
    } <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("session_import", "has_cycle"),
    [
        ("from pkg.sub import sweep\n", True),  # absolute
        ("from . import sweep\n", True),  # relative
        ("def f():\n    from pkg.sub.sweep import run\n", True),  # lazy, inside a function
        ("from pkg.sub import spec\n", False),
    ],
)
def test_the_cycle_finder_finds_a_planted_cycle(tmp_path: Path, session_import: str, has_cycle: bool) -> None:
    root = tmp_path / "pkg"
    _write(root, "__init__.py", "")
    _write(root, "sub/__init__.py", "")
    _write(root, "sub/spec.py", "X = 1\n")
    _write(root, "sub/sweep.py", "from pkg.sub.session import Session\nfrom pkg.sub.spec import X\n")
    _write(root, "sub/session.py", session_import)
    cycle = find_cycle(import_graph(root))
    assert (cycle is not None) is has_cycle, cycle
    if has_cycle:
        assert cycle[0] == cycle[-1] and {"pkg.sub.session", "pkg.sub.sweep"} <= set(cycle)
