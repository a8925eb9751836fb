"""Every name WebDataset 1.0.2's modules bind exists at the same path in shardstream.

The names are read from the installed ``webdataset`` package's source with ``ast`` (no import, so
``webdataset.multi`` counts although it needs pyzmq). For the module that
``shardstream.install_as_webdataset()`` maps ``webdataset.<name>`` to
(``shardstream.compat.<name>``, ``shardstream.tenbin``, ``shardstream`` for the package): every
top-level ``def``, ``class`` and assignment, public or ``_``-prefixed, and every name the module
imports with ``from ... import`` (``from .utils import obsolete``, ``from subprocess import
PIPE``; ``typing`` names excepted), and every WebDataset module it binds (``from . import gopen``,
``import webdataset.gopen as gopen``), which must be shardstream's object for what WebDataset's
name holds at run time. For the submodules ``import shardstream as wds`` code reaches as
``wds.<name>`` where that is a native package (``wds.cache``, ``wds.pipeline``, ``wds.handlers``):
the names WebDataset defines and imports from its own modules. Plain ``import os``/``import numpy
as np`` bindings are left out. A deliberate omission exists and raises ``NotImplementedError`` on
use, saying why.

Until issue 43 the test read neither absolute imports nor module bindings, and skipped the
``wds.cache``/``wds.pipeline`` packages, so ``gopen.PIPE``, ``writer.gopen``, ``wds.cache.obsolete``,
``wds.cache.reraise_exception`` and ``wds.pipeline.add_length_method`` were missing unseen (and
a dozen more: the compat modules' ``utils``, ``urlparse``, ``islice``, ...).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest
from _components import require_module

import shardstream
from shardstream.compat.install import WEBDATASET_MODULES

webdataset = require_module("webdataset", "the comparison with WebDataset 1.0.2")
ROOT = Path(webdataset.__file__).parent
MODULES = sorted(p.stem for p in ROOT.glob("*.py") if p.stem != "__init__")

#: Deliberately not provided: (module, name) -> a word on why (each raises NotImplementedError).
OMITTED = {
    ("", "LMDBCached"): "pickled LMDB sample cache",
    ("", "MultiShardSample"): "YAML mixtures, obsolete in WebDataset",
    ("filters", "LMDBCached"): "pickled LMDB sample cache",
    ("shardlists", "MultiShardSample"): "YAML mixtures",
    ("shardlists", "MSSource"): "YAML mixtures",
    ("gopen", "Pipe"): "shardstream runs pipe: itself",
    ("gopen", "gopen_hf"): "external command",
    ("gopen", "gopen_gsutil"): "external command",
    ("gopen", "gopen_ais"): "external command",
    ("multi", "MultiLoader"): "ZMQ loader",
    ("multi", "reader"): "ZMQ loader",
}


#: Names not provided yet, in a file outside this change's scope (compat/mix.py): listed so that
#: the test fails when one appears (then delete it here) and on any other gap.
PENDING: set[str] = set()


#: Modules whose names only annotate (``from typing import Any``): not part of any API.
ANNOTATIONS = {"typing", "__future__", "collections.abc"}


def _bindings(module: str) -> tuple[set[str], set[str], dict[str, str]]:
    """``webdataset.<module>``'s top-level bindings: (names it defines or imports from its own
    modules, names it imports from other modules, {name: the WebDataset module it binds})."""
    path = ROOT / ("__init__.py" if module == "" else f"{module}.py")
    own: set[str] = set()
    foreign: set[str] = set()
    modules: dict[str, str] = {}

    def visit(body: list[ast.stmt], optional: bool = False) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Assign):
                own.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
            elif isinstance(node, ast.ImportFrom) and node.level > 0 and node.module is None:
                modules.update({a.asname or a.name: f"webdataset.{a.name}" for a in node.names})
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                own.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module not in ANNOTATIONS and not optional:
                foreign.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("webdataset.") and alias.asname:
                        modules[alias.asname] = alias.name
            elif isinstance(node, (ast.If, ast.Try)):
                # A third-party import under ``except ImportError`` (typeguard's hook) is bound only
                # where that package is installed: not a name WebDataset always has.
                guarded = any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                    for h in getattr(node, "handlers", [])
                )
                visit(node.body, optional or guarded)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, optional)
                visit(node.orelse, optional)

    visit(ast.parse(path.read_text()).body)
    dunder = {n for n in own | foreign if n.startswith("__") and n.endswith("__")}
    return own - dunder, foreign - dunder - set(modules), modules


def defined_names(module: str) -> set[str]:
    """What the install target of ``webdataset.<module>`` must have (see the module docstring)."""
    own, foreign, modules = _bindings(module)
    return own | foreign | set(modules)


def api_names(module: str) -> set[str]:
    """What ``wds.<module>`` must have where it is a native package: WebDataset's own names."""
    return _bindings(module)[0]


def target(module: str) -> ModuleType:
    """shardstream's module at WebDataset's path ``module`` (what ``install_as_webdataset`` maps)."""
    return importlib.import_module(WEBDATASET_MODULES["webdataset" + (f".{module}" if module else "")])


def alias(module: str) -> ModuleType | None:
    """``wds.<module>`` when it is a module other than the install target (a native package)."""
    found = getattr(shardstream, module, None) if module else None
    return found if inspect.ismodule(found) and found is not target(module) else None


def ours(module: str) -> list[ModuleType]:
    """shardstream's modules at WebDataset's path ``module`` (the install target, the wds.<name>)."""
    native = alias(module)
    return [target(module)] if native is None else [target(module), native]


def test_every_webdataset_module_is_mapped() -> None:
    assert {f"webdataset.{m}" for m in MODULES} <= set(WEBDATASET_MODULES)


@pytest.mark.parametrize("module", ["", *MODULES])
def test_every_name_exists(module: str) -> None:
    wanted = [(target(module), defined_names(module))]
    native = alias(module)
    if native is not None:
        wanted.append((native, api_names(module)))
    missing = {f"{mod.__name__}.{name}" for mod, names in wanted for name in names if not hasattr(mod, name)}
    pending = {p for p in PENDING if p.rpartition(".")[0] in {m.__name__ for m in ours(module)}}
    assert missing - pending == set(), f"WebDataset 1.0.2 names missing in shardstream: {sorted(missing)}"
    assert pending <= missing, f"provided now, delete from PENDING: {sorted(pending - missing)}"


@pytest.mark.parametrize("module", [m for m in ["", *MODULES] if m != "multi"])  # multi needs pyzmq
def test_what_a_module_binds_to_a_webdataset_module_is_ours(module: str) -> None:
    """``webdataset.cache.gopen`` is the ``webdataset.gopen`` module, ours ours; but
    ``webdataset.writer.gopen`` is the function ``gopen.gopen`` (its ``from . import gopen`` runs
    after the package bound that name to the function): ours is our function."""
    theirs_module = importlib.import_module("webdataset" + (f".{module}" if module else ""))
    for name in sorted(_bindings(module)[2]):
        theirs = getattr(theirs_module, name)
        if inspect.ismodule(theirs):
            expected = importlib.import_module(WEBDATASET_MODULES[theirs.__name__])
        else:
            expected = getattr(
                importlib.import_module(WEBDATASET_MODULES[theirs.__module__]), theirs.__name__
            )
        assert getattr(target(module), name) is expected, (module, name)


@pytest.mark.parametrize(("module", "name"), sorted(OMITTED))
def test_an_omission_raises_saying_why(module: str, name: str) -> None:
    for mod in ours(module):
        with pytest.raises(NotImplementedError, match="not provided by shardstream: .+"):
            getattr(mod, name)()
