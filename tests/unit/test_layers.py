"""The layers of chronik and the one rule between them: a module imports only from its own
layer or the layers below it (docs/architecture.md). Imports only a type checker runs
(under ``if TYPE_CHECKING:``) are left out: they cost nothing at run time and make no
circle. Only chronik.broker.server wires every layer together, and it is in the broker
layer, so it needs no exception."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "chronik"

# Top to bottom; the layers on one line are peers and may import each other.
LAYERS: list[set[str]] = [
    {"cli", "__main__"},
    {"spark", "eventstore"},
    {"broker"},
    {"http"},
    {"cluster"},
    {"coordinator", "registry"},
    {"security"},
    {"storage"},
    {"records", "protocol", "schemas", "__init__"},
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> str:
    """``chronik.broker.apis.produce`` -> ``broker``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_only_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skip.update(id(n) for n in ast.walk(inner))
    return skip


def imports_of(source: str, module: str) -> list[tuple[int, str]]:
    """(line, imported chronik module) of every run-time import in a module's source."""
    tree = ast.parse(source)
    skip = _type_only_nodes(tree)
    package = module.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:  # a relative import, resolved against the package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, name] if name else base)
            if name == "chronik" or (node.level and not node.module):
                found.extend((node.lineno, f"{name}.{a.name}") for a in node.names)
            elif name.startswith("chronik."):
                found.append((node.lineno, name))
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, a.name) for a in node.names if a.name.startswith("chronik.")
            )
    return found


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(("chronik", *parts))


def violations(root: Path) -> list[str]:
    """Every import of a layer above the importing module's, and every module in a layer
    the table does not know."""
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        here = layer_of(module)
        if here not in RANK:
            out.append(f"{module}: layer {here!r} is not in LAYERS")
            continue
        for line, target in imports_of(path.read_text(), module):
            there = layer_of(target)
            if there not in RANK:
                out.append(f"{module}:{line} imports {target}: layer {there!r} unknown")
            elif RANK[there] < RANK[here]:
                out.append(f"{module}:{line} ({here}) imports {target} ({there}), a layer above")
    return out


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert violations(SRC) == []


def test_the_guard_catches_an_upward_import(tmp_path: Path) -> None:
    """The guard's self-check: a storage module importing the broker is reported, a
    type-only import of it is not."""
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "__init__.py").write_text("")
    (storage / "bad.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from chronik.records import batch\n"
        "if TYPE_CHECKING:\n"
        "    from chronik.broker.server import Broker\n"
        "def f():\n"
        "    from chronik.broker import topics\n"
    )
    found = violations(tmp_path)
    assert found == [
        "chronik.storage.bad:6 (storage) imports chronik.broker (broker), a layer above"
    ]


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from . import topics\n", "chronik.broker.apis.produce", ["chronik.broker.apis.topics"]),
        ("from ..topics import x\n", "chronik.broker.apis.produce", ["chronik.broker.topics"]),
        ("import chronik.cluster.node\n", "chronik.storage.log", ["chronik.cluster.node"]),
        ("from chronik import cluster\n", "chronik.storage.log", ["chronik.cluster"]),
    ],
)
def test_imports_are_resolved(source: str, module: str, expected: list[str]) -> None:
    assert [name for _, name in imports_of(source, module)] == expected


def layer_graph(root: Path = SRC) -> dict[str, dict[str, int]]:
    """Layer -> {imported layer: number of imports}: the graph docs/architecture.md shows."""
    graph: dict[str, dict[str, int]] = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        here = layer_of(module)
        for _, target in imports_of(path.read_text(), module):
            there = layer_of(target)
            if there != here:
                edges = graph.setdefault(here, {})
                edges[there] = edges.get(there, 0) + 1
    return graph


if __name__ == "__main__":  # prints the graph for docs/architecture.md
    for layer, edges in sorted(layer_graph().items(), key=lambda kv: RANK.get(kv[0], 99)):
        targets = sorted(edges.items(), key=lambda kv: RANK.get(kv[0], 99))
        print(f"{layer:12} -> " + ", ".join(f"{t} ({n})" for t, n in targets))
