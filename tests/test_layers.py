"""The layering that docs/ARCHITECTURE.md promises, checked on every module's imports.

Read from the source with ``ast`` (nothing is imported), so a module that imports Ray or a
higher layer inside a function is caught as well as one that does it at the top. Modules
named in strings (started with ``python -m``, imported with ``importlib``) count as imports,
and the page's picture of the floors must agree with :data:`FLOORS`.
"""

from __future__ import annotations

import ast
import re
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


def _imported_names(source: str, where: str = "<source>") -> list[str]:
    """Every absolute module name ``source`` imports, at the top or inside a function."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _modules() -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """(the module's path parts below deepedge/, every absolute module name it imports)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        names = _imported_names(path.read_text(), str(path))
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


# The floors of the house, lowest first: a module imports only its own package and packages
# on lower floors (function-local imports included), so dependencies point down.
FLOORS: dict[str, int] = {
    "core": 0,
    "cluster": 1,  # node documents and state: every layer above may read them
    "perfmodel": 2,
    "planning": 3,
    "learning": 4,
    "dataplane": 4,  # the data plane's pure parts
    "workload": 5,
    "profiling": 6,
    "sim": 6,
    "runtime": 7,  # the only one importing Ray
    "service": 8,  # the job service (its learners call the runtime)
    "controlplane": 9,  # deployments kept accurate: jobs of the service, serving by the runtime
    "api": 10,  # the service's entry points build the manager and the control plane here
    "cli": 11,
    "bench": 12,
    "__main__": 13,
    "__init__": 13,
}


def test_every_package_has_a_floor() -> None:
    assert {_layer(parts) for parts, _ in MODULES} <= set(FLOORS)


def _upward(modules: list[tuple[tuple[str, ...], list[str]]]) -> list[tuple[str, str]]:
    """(module, name) for every import of a package on the importer's floor or above."""
    return [
        (".".join(parts), name)
        for parts, names in modules
        for name in names
        if (layer := _imported_layer(name)) is not None
        and layer != _layer(parts)
        and FLOORS.get(layer, 99) >= FLOORS[_layer(parts)]
    ]


def test_imports_only_point_down() -> None:
    assert _upward(MODULES) == []


def test_the_floor_check_sees_an_upward_import_inside_a_function() -> None:
    """(It can fail: an import of a higher floor, or of a package on the same floor, hidden
    in a function body; an import of a lower floor passes.)"""
    hidden = "def f() -> None:\n    from deepedge.service.store import JobStore\n"
    assert _upward([(("runtime", "m"), _imported_names(hidden))]) == [
        ("runtime.m", "deepedge.service.store")
    ]
    assert _upward([(("learning", "m"), ["deepedge.dataplane.keys"])]) == [
        ("learning.m", "deepedge.dataplane.keys")
    ]
    assert _upward([(("service", "m"), ["deepedge.runtime.cluster.session"])]) == []


def test_the_package_imports_by_absolute_names_only() -> None:
    """The checks here read absolute names; a relative import would pass them unseen."""
    relative = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert relative == []


def _named_modules() -> Iterator[tuple[tuple[str, ...], str]]:
    """(module's path parts, a ``deepedge.<package>...`` name it holds as a string): the
    modules it runs with ``python -m`` or imports by name (``importlib``)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                bits = node.value.split(".")
                if (
                    len(bits) > 1
                    and bits[0] == "deepedge"
                    and bits[1] in FLOORS
                    and all(bit.isidentifier() for bit in bits)
                ):
                    yield parts, node.value


def _names_a_module(name: str) -> bool:
    """``name`` is a module or package of this tree, or an attribute of a module file."""
    module = name.rpartition(".")[0]
    return _exists(name) or PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py").is_file()


def test_modules_named_in_strings_exist_and_point_down() -> None:
    """A module started with ``python -m`` or imported by name is an import as well: it
    must exist (a move would otherwise break it silently) and lie on a floor below, or in
    the same package."""
    named = list(_named_modules())
    assert len(named) > 10
    assert [(".".join(p), n) for p, n in named if not _names_a_module(n)] == []
    assert _upward([(parts, [name]) for parts, name in named]) == []


def test_the_architecture_page_draws_the_floors_of_this_test() -> None:
    """docs/ARCHITECTURE.md's picture of the layers, top floor first, row by row."""
    page = (PACKAGE.parents[1] / "docs" / "ARCHITECTURE.md").read_text()
    picture = page.split("## The layers", 1)[1].split("```", 2)[1]
    rows = [
        [name.strip() for name in found.group(1).split(",")]
        for line in picture.splitlines()
        if (found := re.match(r"^  ([a-z_]+(?:, [a-z_]+)*)\s", line))
    ]
    drawn = [name for row in rows for name in row]
    assert sorted(drawn) == sorted(set(FLOORS) - {"__main__", "__init__"})
    floors = [{FLOORS[name] for name in row} for row in rows]
    assert all(len(row) == 1 for row in floors), rows  # a row is one floor
    assert [row.pop() for row in floors] == sorted(  # and the rows go down, floor by floor
        {FLOORS[name] for name in drawn}, reverse=True
    )


def _module_graph() -> dict[str, set[str]]:
    """Module -> the deepedge modules it imports (``from package import module`` counts as
    the module, not the package)."""
    names = {"deepedge." + ".".join(p.removesuffix("/__init__") for p in parts).removesuffix(
        ".__init__") for parts, _ in MODULES}  # fmt: skip
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        me = ".".join(("deepedge", *parts)).removesuffix(".__init__")
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names
                         else node.module for a in node.names]  # fmt: skip
            for target in found:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                if target and target not in {me, "deepedge"}:
                    targets.add(target)
        graph[me] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle a depth-first walk meets (each as the modules around it)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return circles


def test_no_import_circle_between_modules() -> None:
    graph = _module_graph()
    assert len(graph) > 150
    assert _circles(graph) == []


def test_the_circle_check_sees_a_circle() -> None:
    """(It can fail: two modules importing each other, even inside functions.)"""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def _exists(name: str) -> bool:
    """``deepedge.a.b`` names a module file or a package of this tree."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def test_every_import_of_the_package_names_a_module_that_exists() -> None:
    """mypy ignores missing imports (third-party stubs), so a module moved away from under
    its importers is caught here, function-local imports included."""
    missing = [
        (".".join(parts), name)
        for parts, names in MODULES
        for name in names
        if name.startswith("deepedge.") and not _exists(name)
    ]
    assert missing == []
