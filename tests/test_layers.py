"""The layering that docs/ARCHITECTURE.md promises, checked on every module's imports.

Read from the source with ``ast`` (nothing is imported), so a module that imports Ray or a
higher layer inside a function is caught as well as one that does it at the top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "deepedge"
PLANNING_FAMILIES = ("sharding", "window", "placement")
# What a pure planner may import besides the standard library's pure parts.
PLANNING_MAY_IMPORT = {"numpy", "scipy", "networkx", "pydantic", "highspy", "deepedge"}
PLANNING_STDLIB = {
    "__future__", "bisect", "collections", "dataclasses", "enum", "functools", "heapq",
    "itertools", "logging", "math", "typing",
}  # fmt: skip
RENDERING = {"cli", "api"}


def _modules() -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """(the module's path parts below deepedge/, every absolute module name it imports)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.append(node.module)
        yield path.relative_to(PACKAGE).with_suffix("").parts, names


MODULES = list(_modules())


def _layer(parts: tuple[str, ...]) -> str:
    return parts[0]


def _imported_layer(name: str) -> str | None:
    bits = name.split(".")
    return bits[1] if bits[0] == "deepedge" and len(bits) > 1 else None


def test_the_package_is_read() -> None:
    layers = {_layer(parts) for parts, _ in MODULES}
    assert {"runtime", "planning", "service", "cli", "api", "bench"} <= layers
    assert len(MODULES) > 150


def test_only_runtime_imports_ray() -> None:
    offenders = [
        ".".join(parts)
        for parts, names in MODULES
        if _layer(parts) != "runtime" and any(n.split(".")[0] == "ray" for n in names)
    ]
    assert offenders == []


def test_only_the_cli_the_api_and_benchmarks_import_the_rendering_layers() -> None:
    offenders = [
        (".".join(parts), name)
        for parts, names in MODULES
        for name in names
        if _imported_layer(name) in RENDERING
        and _layer(parts) not in RENDERING | {"bench", "__main__"}
    ]
    assert offenders == []


def test_nothing_imports_the_benchmarks_or_the_tests() -> None:
    offenders = [
        (".".join(parts), name)
        for parts, names in MODULES
        for name in names
        if (_imported_layer(name) == "bench" and _layer(parts) != "bench")
        or name.split(".")[0] == "tests"
    ]
    assert offenders == []


def test_the_cli_does_not_import_benchmarks_and_the_service_not_the_api() -> None:
    offenders = [
        (".".join(parts), name)
        for parts, names in MODULES
        for name in names
        if (_layer(parts) == "service" and _imported_layer(name) in RENDERING)
        or (_layer(parts) == "cli" and _imported_layer(name) == "bench")
    ]
    assert offenders == []


@pytest.mark.parametrize("family", PLANNING_FAMILIES)
def test_a_planning_family_is_pure_and_imports_no_other_family(family: str) -> None:
    ours = [(p, n) for p, n in MODULES if p[:2] == ("planning", family)]
    assert ours, family
    for parts, names in ours:
        where = ".".join(parts)
        for name in names:
            top = name.split(".")[0]
            assert top in PLANNING_MAY_IMPORT | PLANNING_STDLIB, (where, name)
            if top == "deepedge":
                bits = name.split(".")
                assert _imported_layer(name) in {"planning", "core", "cluster", "perfmodel"}, (
                    where,
                    name,
                )
                if _imported_layer(name) == "planning" and len(bits) > 2:
                    assert bits[2] == family, (where, name)
