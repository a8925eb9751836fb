"""Layering of src/shardstream: no upward imports between layers, no import cycles, and no
private name crossing a package.

The import graph is read from the source with ``ast``: every ``import`` and ``from ... import``,
including lazy ones inside functions, with relative imports resolved to absolute names. Imports
under ``if TYPE_CHECKING:`` never run, so they are exempt. Dynamic imports
(``importlib.import_module(name)``, ``"module:function"`` registry strings) are not seen.
"""

from __future__ import annotations

import ast
import textwrap
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

# ------------------------------------------------------------------ the layer table: edit here
#: layer -> the modules and packages in it. An entry covers itself and every module below it,
#: except the root package, which covers only its own ``__init__.py``. Every module under
#: src/shardstream must be covered, so a new package has to be placed here.
LAYERS: dict[str, tuple[str, ...]] = {
    "base": (
        "shardstream.errors",
        "shardstream.config",
        "shardstream.handlers",
        "shardstream.malloc",
        "shardstream.tenbin",
        "shardstream.forks",
        "shardstream.optional",
        "shardstream.faults",
        "shardstream.paths",
        "shardstream.deprecation",
    ),
    "planning": ("shardstream.shards",),  # pure functions of (shards, world)
    "net": ("shardstream.net",),  # HTTP/1.1 on sockets: no URL scheme, no S3
    "sources": ("shardstream.sources",),
    "decoders": ("shardstream.decoders",),  # leaves that see bytes
    "cache": ("shardstream.cache",),
    "formats": ("shardstream.tar", "shardstream.objects"),
    "telemetry": ("shardstream.telemetry",),  # a leaf the stages call; knows no stage
    "stages": ("shardstream.pipeline",),  # the stage contract and the sample stages
    "readers": ("shardstream.readers",),  # the stages that start a pipeline
    "datasets": ("shardstream.datasets",),  # the front doors
    "loader": ("shardstream.loader",),
    "facades": (
        "shardstream.compat",
        "shardstream.cli",
        "shardstream.ray",
        "shardstream.testing",
        "shardstream",
    ),
}

#: layer -> the other layers it may import (a layer may always import itself).
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "base": (),
    "planning": ("base",),
    "net": ("base",),
    "sources": ("base", "net"),
    "decoders": ("base",),
    "cache": ("base", "sources"),
    "formats": ("base", "net", "sources", "decoders"),
    "telemetry": ("base",),
    "stages": ("base", "planning", "sources", "decoders", "telemetry"),
    "readers": ("base", "planning", "sources", "decoders", "cache", "formats", "telemetry", "stages"),
    "datasets": (
        "base", "planning", "sources", "decoders", "cache", "formats", "telemetry", "stages", "readers",
    ),
    "loader": ("base", "planning", "sources", "decoders", "telemetry", "stages", "readers", "datasets"),
    "facades": (
        "base", "planning", "net", "sources", "decoders", "cache", "formats", "telemetry", "stages",
        "readers", "datasets", "loader",
    ),
}  # fmt: skip

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "src" / "shardstream"


# ------------------------------------------------------------------ the checker


@dataclass(frozen=True, order=True)
class Edge:
    """``importer`` imports ``imported`` at ``file:line``; ``lazy`` when inside a function."""

    importer: str
    imported: str
    file: str
    line: int
    lazy: bool
    #: The private names (``_x``) taken from ``imported`` by ``from imported import _x``.
    private: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.file}:{self.line}{', lazy' if self.lazy else ''})"


@dataclass(frozen=True)
class Graph:
    """The modules of one package tree (name -> file, relative for messages) and their imports."""

    root: str
    modules: dict[str, str]
    edges: tuple[Edge, ...]


class _Collector(ast.NodeVisitor):
    """Collects the imports of one module, resolved to absolute names."""

    def __init__(self, module: str, is_package: bool, file: str, known: Iterable[str]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.file = file
        self.known = frozenset(known)
        self.depth = 0  # > 0 inside a function body: the import runs when the function is called
        self.type_checking = {"TYPE_CHECKING"}  # names bound to typing.TYPE_CHECKING
        self.found: list[tuple[str, int, bool, tuple[str, ...]]] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id in self.type_checking) or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):  # the body never runs; an else branch does
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, node.lineno, self.depth > 0, ()))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module in ("typing", "typing_extensions") and not node.level:
            self.type_checking.update(a.asname or a.name for a in node.names if a.name == "TYPE_CHECKING")
        base = node.module or ""
        if node.level:
            package = self.package
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            if not package:
                raise ValueError(f"{self.file}:{node.lineno}: relative import goes above the top package")
            base = f"{package}.{base}" if base else package
        for alias in node.names:
            # `from pkg import name` imports the submodule pkg.name when there is one.
            submodule = f"{base}.{alias.name}"
            if submodule in self.known:
                self.found.append((submodule, node.lineno, self.depth > 0, ()))
            else:
                private = (alias.name,) if _is_private(alias.name) else ()
                self.found.append((base, node.lineno, self.depth > 0, private))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path, package_dir: Path) -> tuple[str, bool]:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def build_graph(package_dir: Path, relative_to: Path) -> Graph:
    """Parse every module under ``package_dir`` and return its internal import graph.

    Args:
        package_dir: the top package's directory (``src/shardstream``).
        relative_to: file names in messages are relative to this directory.
    """
    root = package_dir.name
    paths = sorted(package_dir.rglob("*.py"))
    modules = {_module_name(p, package_dir)[0]: p.relative_to(relative_to).as_posix() for p in paths}
    edges: set[Edge] = set()
    for path in paths:
        name, is_package = _module_name(path, package_dir)
        collector = _Collector(name, is_package, modules[name], modules)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for imported, line, lazy, private in collector.found:
            if (imported == root or imported.startswith(root + ".")) and imported != name:
                edges.add(Edge(name, imported, collector.file, line, lazy, private))
    return Graph(root, modules, tuple(sorted(edges)))


def unit_of(module: str, root: str, layers: Mapping[str, Iterable[str]]) -> tuple[str, str] | None:
    """``(layer, entry)`` for the most specific table entry covering ``module``, else None."""
    best: tuple[str, str] | None = None
    for layer, entries in layers.items():
        for entry in entries:
            covers = module == entry or (entry != root and module.startswith(entry + "."))
            if covers and (best is None or len(entry) > len(best[1])):
                best = (layer, entry)
    return best


def find_layer_violations(
    graph: Graph, layers: Mapping[str, Iterable[str]], may_import: Mapping[str, Iterable[str]]
) -> list[str]:
    """Modules in no layer, and imports of a layer the importer's layer may not use."""
    problems: list[str] = []
    for module, file in sorted(graph.modules.items()):
        if unit_of(module, graph.root, layers) is None:
            problems.append(f"{module} ({file}): in no layer; add it (or its package) to LAYERS")
    for edge in graph.edges:
        source = unit_of(edge.importer, graph.root, layers)
        target = unit_of(edge.imported, graph.root, layers)
        if source is None:
            continue  # reported above
        if target is None:
            problems.append(f"{edge}: {edge.imported} is in no layer")
            continue
        allowed = set(may_import.get(source[0], ())) | {source[0]}
        if target[0] not in allowed:
            may = ", ".join(sorted(allowed))
            problems.append(
                f"{edge}: layer {source[0]!r} ({source[1]}) may import only {may}; "
                f"{target[1]} is in layer {target[0]!r}"
            )
    return problems


def _owner(module: str, is_package: bool) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to the package itself)."""
    return module if is_package else module.rpartition(".")[0]


def find_private_crossings(graph: Graph) -> list[str]:
    """Imports of another package's private module (``pkg._mod``) or private name
    (``from pkg.mod import _name``): what is shared across packages needs a public name.

    A private module or name belongs to the package that contains it; its own modules and
    subpackages may import it, nothing else may.
    """
    packages = {m for m, f in graph.modules.items() if f.endswith("__init__.py")}
    problems: list[str] = []
    for edge in graph.edges:
        importer = _owner(edge.importer, edge.importer in packages)
        parts = edge.imported.split(".")
        for i, part in enumerate(parts):
            if _is_private(part):
                home = ".".join(parts[:i])
                if importer != home and not importer.startswith(home + "."):
                    problems.append(
                        f"{edge}: {edge.imported} is private to {home}; give what {importer} needs a "
                        "public name there"
                    )
                break
        for name in edge.private:
            home = _owner(edge.imported, edge.imported in packages)
            if importer != home and not importer.startswith(home + "."):
                problems.append(
                    f"{edge}: {name} is private to {edge.imported}; give what {importer} needs a public name"
                )
    return problems


def _strongly_connected(nodes: Iterable[str], succ: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the strongly connected components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(succ.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return sorted(found)


def _shortest_cycle(start: str, members: set[str], succ: Mapping[str, set[str]]) -> list[str]:
    """Nodes of a shortest cycle through ``start`` inside ``members`` (start first, not repeated)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(succ.get(node, set()) & members):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")


def _cycles(edges: Iterable[tuple[str, str, Edge]], what: str) -> list[str]:
    """One message per cycle in a graph given as (source, target, the import that makes it) triples."""
    succ: dict[str, set[str]] = {}
    witness: dict[tuple[str, str], Edge] = {}
    for source, target, edge in sorted(edges, key=lambda t: (t[0], t[1], t[2])):
        if source != target:
            succ.setdefault(source, set()).add(target)
            witness.setdefault((source, target), edge)
    problems = []
    for component in _strongly_connected(succ, succ):
        cycle = _shortest_cycle(component[0], set(component), succ)
        hops = [str(witness[(a, b)]) for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
        problems.append(
            f"{what} cycle {' -> '.join([*cycle, cycle[0]])} (all of {', '.join(component)}): "
            + "; ".join(hops)
        )
    return problems


def find_package_cycles(graph: Graph, layers: Mapping[str, Iterable[str]]) -> list[str]:
    """Cycles between the table's entries (packages and top-level modules), lazy imports included."""
    triples = []
    for edge in graph.edges:
        source = unit_of(edge.importer, graph.root, layers)
        target = unit_of(edge.imported, graph.root, layers)
        if source is not None and target is not None:
            triples.append((source[1], target[1], edge))
    return _cycles(triples, "package")


def find_module_cycles(graph: Graph) -> list[str]:
    """Cycles between modules through top-level (import-time) imports."""
    return _cycles(((e.importer, e.imported, e) for e in graph.edges if not e.lazy), "module")


def _report(title: str, problems: list[str]) -> str:
    return f"{len(problems)} {title}:\n" + "\n".join(f"  {p}" for p in problems)


# ------------------------------------------------------------------ the real tree


def _real_graph() -> Graph:
    graph = build_graph(PACKAGE_DIR, ROOT)
    # Guard against a vacuous pass (wrong directory, parser finding nothing).
    assert len(graph.modules) > 50 and len(graph.edges) > 100, (len(graph.modules), len(graph.edges))
    return graph


def test_layer_table_is_consistent() -> None:
    assert set(MAY_IMPORT) == set(LAYERS)
    for layer, allowed in MAY_IMPORT.items():
        assert set(allowed) <= set(LAYERS), (layer, allowed)
    entries = [entry for layer_entries in LAYERS.values() for entry in layer_entries]
    assert len(entries) == len(set(entries)), "an entry is in two layers"


def test_imports_follow_the_layers() -> None:
    graph = _real_graph()
    problems = find_layer_violations(graph, LAYERS, MAY_IMPORT) + find_package_cycles(graph, LAYERS)
    if problems:
        pytest.fail(_report("layering violations (importer -> imported (file:line): rule)", problems), False)


def test_no_private_name_crosses_a_package() -> None:
    problems = find_private_crossings(_real_graph())
    if problems:
        pytest.fail(_report("private names imported across packages", problems), False)


def test_no_module_cycles_through_top_level_imports() -> None:
    problems = find_module_cycles(_real_graph())
    if problems:
        pytest.fail(_report("import cycles through top-level imports", problems), False)


# ------------------------------------------------------------------ the checker on a synthetic tree

TOY_LAYERS: dict[str, tuple[str, ...]] = {
    "low": ("toy.low",),
    "high": ("toy.high", "toy.side"),
    "top": ("toy",),
}
TOY_MAY_IMPORT: dict[str, tuple[str, ...]] = {"low": (), "high": ("low",), "top": ("low", "high")}
TOY_FILES = {
    "toy/__init__.py": "from . import high\n",
    "toy/low/__init__.py": """
        from typing import TYPE_CHECKING as _TYPE_CHECKING

        if _TYPE_CHECKING:
            from ..high import api  # exempt too
    """,
    "toy/low/impl.py": """
        from __future__ import annotations

        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from toy.high.api import Thing  # exempt: never runs

        def make() -> Thing:
            from ..high.api import Thing  # lazy and upward: a violation

            return Thing()
    """,
    "toy/high/__init__.py": "from .api import Thing\n",
    "toy/high/api.py": """
        from ..low import impl  # downward: fine
        from . import loop_a

        class Thing:
            pass
    """,
    "toy/high/loop_a.py": "from .loop_b import B\nA = 1\n",
    "toy/high/loop_b.py": "from .loop_a import A\nB = 2\n",
    "toy/high/_secret.py": "S = 1\n",
    "toy/high/inner/__init__.py": "from .._secret import S  # a subpackage of high: allowed\n",
    "toy/side/__init__.py": "",
    "toy/side/peek.py": """
        from ..high._secret import S  # another package's private module
        from ..high.api import _hidden
    """,
    "toy/stray.py": "import toy.low.impl\n",
}


def _toy_graph(tmp_path: Path) -> Graph:
    for name, text in TOY_FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return build_graph(tmp_path / "toy", tmp_path)


def test_checker_reports_a_lazy_upward_import(tmp_path: Path) -> None:
    graph = _toy_graph(tmp_path)
    problems = find_layer_violations(graph, TOY_LAYERS, TOY_MAY_IMPORT)
    assert problems == [
        "toy.stray (toy/stray.py): in no layer; add it (or its package) to LAYERS",
        "toy.low.impl -> toy.high.api (toy/low/impl.py:9, lazy): layer 'low' (toy.low) may import "
        "only low; toy.high is in layer 'high'",
    ]


def test_checker_resolves_relative_imports_and_exempts_type_checking(tmp_path: Path) -> None:
    graph = _toy_graph(tmp_path)
    assert not [e for e in graph.edges if e.importer == "toy.low"]  # under an aliased TYPE_CHECKING
    assert [str(e) for e in graph.edges if e.importer in ("toy", "toy.low.impl", "toy.high.api")] == [
        "toy -> toy.high (toy/__init__.py:1)",
        "toy.high.api -> toy.high.loop_a (toy/high/api.py:2)",
        "toy.high.api -> toy.low.impl (toy/high/api.py:1)",
        "toy.low.impl -> toy.high.api (toy/low/impl.py:9, lazy)",
    ]


def test_checker_reports_private_crossings(tmp_path: Path) -> None:
    graph = _toy_graph(tmp_path)
    assert find_private_crossings(graph) == [
        "toy.side.peek -> toy.high._secret (toy/side/peek.py:1): toy.high._secret is private to "
        "toy.high; give what toy.side needs a public name there",
        "toy.side.peek -> toy.high.api (toy/side/peek.py:2): _hidden is private to toy.high.api; "
        "give what toy.side needs a public name",
    ]


def test_checker_reports_cycles(tmp_path: Path) -> None:
    graph = _toy_graph(tmp_path)
    assert find_module_cycles(graph) == [
        "module cycle toy.high.loop_a -> toy.high.loop_b -> toy.high.loop_a "
        "(all of toy.high.loop_a, toy.high.loop_b): "
        "toy.high.loop_a -> toy.high.loop_b (toy/high/loop_a.py:1); "
        "toy.high.loop_b -> toy.high.loop_a (toy/high/loop_b.py:1)"
    ]
    # low -> high is lazy and high -> low top-level: a package cycle, though no module cycle.
    assert find_package_cycles(graph, TOY_LAYERS) == [
        "package cycle toy.high -> toy.low -> toy.high (all of toy.high, toy.low): "
        "toy.high.api -> toy.low.impl (toy/high/api.py:1); "
        "toy.low.impl -> toy.high.api (toy/low/impl.py:9, lazy)"
    ]
