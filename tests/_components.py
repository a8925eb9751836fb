"""What a test does without an installed component it needs: skip here, fail under ``CI=true``.

`bash run.sh test` installs every component the suite uses (the emulators, the optional packages
of ``shardstream[dev]``, Azurite from npm), so on CI a missing one is a broken set-up, and a run
that skipped its tests would still be green: under ``CI=true`` (``.ci/run``, and what CI services
set) :func:`require_component` fails the test with the message it would have skipped with. On a
developer's machine it skips, saying what is not tested.

The one exception is the CUDA device (:func:`require_cuda`): CI machines have no GPU, so the
device paths stay skipped there too, with "not tested here: no CUDA device". Platform conditions
(Windows, no ``fork()``, no ``epoll``) are not components and keep their plain ``skipif``.

Imported by ``tests/conftest.py`` (its emulator fixtures) and by the tests themselves as
``from _components import ...`` (``tests/`` is on ``sys.path``, as for ``_servers``); a module of
its own because ``conftest`` cannot be imported by name from a directory with its own conftest.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["in_ci", "missing", "require_component", "require_cuda", "require_module"]


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``, or ``1``/``yes``: every component must be there)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


#: How a missing component is installed, unless a caller says otherwise.
SETUP = "`bash run.sh setup` installs it"


def missing(name: str, reason: str, *, install: str = SETUP) -> NoReturn:
    """``name`` is not installed: skip with "not tested here: ``reason``" (and how to install
    it), or fail with the same message under CI."""
    message = f"not tested here: {reason} ({name} is not installed; {install})"
    if in_ci():
        pytest.fail(f"{message}. CI=true runs every test: a missing component fails it", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_component(name: str, reason: str, *, present: bool, install: str = SETUP) -> None:
    """Go on when ``present``; else :func:`missing` (skip here, fail under ``CI=true``)."""
    if not present:
        missing(name, reason, install=install)


def require_module(module: str, reason: str, *, package: str | None = None) -> ModuleType:
    """``module`` imported, or :func:`missing` (``package``: its PyPI name, when it differs).
    The ``pytest.importorskip`` of this suite."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(package or module.partition(".")[0], reason)


def require_cuda(reason: str) -> None:
    """Skip unless a CUDA device is present, under ``CI=true`` too (CI machines have none): the
    documented exception to :func:`require_component`."""
    torch = require_module("torch", reason)
    if not torch.cuda.is_available():
        pytest.skip(f"not tested here: no CUDA device ({reason})", allow_module_level=True)
