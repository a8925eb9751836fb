"""Import optional decoding backends on first use, with an install hint when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, *, purpose: str, install: str) -> ModuleType:
    """Import ``module`` or raise ImportError saying what needs it and what to install.

    Args:
        module: dotted module name, e.g. ``"msgpack"``.
        purpose: what needs it, e.g. ``"decoding .mp fields"``.
        install: the install command to suggest, e.g. ``"pip install msgpack"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs the {module!r} package, which is not installed: {install}"
        ) from exc
