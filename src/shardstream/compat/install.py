"""``install_as_webdataset()``: make ``import webdataset`` resolve to shardstream in this process.

For codebases that import ``webdataset`` in many files: one call, early (before those modules
are imported), and ``import webdataset as wds``, ``from webdataset.filters import ...`` and
``from webdataset import shardlists`` get shardstream's modules. ``webdataset`` is a view of the
``shardstream`` package (every name of ``shardstream``); each WebDataset submodule maps to its
namesake in :mod:`shardstream.compat` (``tenbin`` to :mod:`shardstream.tenbin`, ``compat`` to
the package :mod:`shardstream.compat` itself), also as an attribute of ``webdataset``. A view,
not ``shardstream`` itself: importing ``webdataset.cache`` sets ``webdataset.cache``, which must
not replace ``shardstream.cache`` (the native cache package).

The aliases are ``sys.modules`` entries, made on first import through a meta path finder placed
before every other finder, so that an installed WebDataset is never imported. Modules that
imported the real ``webdataset`` before the call keep it (logged as a warning).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import sys
from types import ModuleType
from typing import Any

__all__ = ["WEBDATASET_MODULES", "install_as_webdataset", "uninstall_webdataset_alias"]

log = logging.getLogger(__name__)

#: WebDataset 1.0.2's module names -> the shardstream module that stands in for each.
WEBDATASET_MODULES: dict[str, str] = {
    "webdataset": "shardstream",
    "webdataset.compat": "shardstream.compat",
    "webdataset.tenbin": "shardstream.tenbin",
    **{
        f"webdataset.{name}": f"shardstream.compat.{name}"
        for name in (
            "autodecode",
            "cache",
            "extradatasets",
            "filters",
            "gopen",
            "handlers",
            "mix",
            "multi",
            "pipeline",
            "pytorch",
            "shardlists",
            "tariterators",
            "typecheck",
            "utils",
            "wids",
            "writer",
        )
    },
}


class WebDatasetAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``webdataset`` and its submodules and loads shardstream's module for each."""

    def __init__(self) -> None:
        self.specs: dict[str, Any] = {}

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in WEBDATASET_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == "webdataset")

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name == "webdataset":
            return WebDatasetView("webdataset")
        module = importlib.import_module(WEBDATASET_MODULES[spec.name])
        # importlib stamps the alias's spec on the module it gets; put the real one back after.
        self.specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        if isinstance(module, WebDatasetView):
            module.__path__ = []  # a package: its submodules are found by this finder
            return
        module.__spec__ = self.specs.pop(module.__spec__.name, module.__spec__)  # type: ignore[union-attr]


class WebDatasetView(ModuleType):
    """The ``webdataset`` module: shardstream's names, with WebDataset's submodules."""

    def __getattr__(self, name: str) -> Any:
        shardstream = importlib.import_module("shardstream")
        target = WEBDATASET_MODULES.get(f"webdataset.{name}")
        if target is None or not isinstance(getattr(shardstream, name, None), (ModuleType, type(None))):
            return getattr(shardstream, name)  # ``webdataset.gopen`` is the function, as in WebDataset
        return importlib.import_module(target)

    def __setattr__(self, name: str, value: Any) -> None:
        # importlib binds each imported submodule on its parent; here they are resolved above.
        if not (isinstance(value, ModuleType) and f"webdataset.{name}" in WEBDATASET_MODULES):
            super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(importlib.import_module("shardstream"))) | set(super().__dir__()))


def install_as_webdataset() -> None:
    """Make ``import webdataset`` (and every ``webdataset.<module>``) resolve to shardstream.

    Call it once, before the modules that import ``webdataset``; calling it again does nothing.
    """
    if not any(isinstance(finder, WebDatasetAlias) for finder in sys.meta_path):
        sys.meta_path.insert(0, WebDatasetAlias())
    real = sorted(
        name
        for name, module in list(sys.modules.items())
        if (name == "webdataset" or name.startswith("webdataset."))
        and not isinstance(module, WebDatasetView)
        and not (module.__name__ or "").startswith("shardstream")
    )
    for name in real:
        del sys.modules[name]  # the next import resolves to shardstream
    if real:
        log.warning(
            "install_as_webdataset(): WebDataset was imported before the call (%s); modules that "
            "imported it keep the real one. Call install_as_webdataset() before importing them.",
            ", ".join(real),
        )


def uninstall_webdataset_alias() -> None:
    """Undo :func:`install_as_webdataset` (for tests): later imports find the real WebDataset."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, WebDatasetAlias)]
    for name in [n for n in sys.modules if n == "webdataset" or n.startswith("webdataset.")]:
        module = sys.modules[name]
        if isinstance(module, WebDatasetView) or module.__name__.startswith("shardstream"):
            del sys.modules[name]
