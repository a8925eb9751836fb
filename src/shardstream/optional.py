"""Optional dependencies: import them on first use with an install hint, and tell whether this
process is a torch DataLoader worker (without importing torch) or this thread one of a loader's."""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

__all__ = [
    "TORCH_INSTALL_HINT",
    "in_loader_thread",
    "in_worker",
    "mark_loader_thread",
    "require",
    "require_torch",
]

#: What to do when torch is missing. shardstream does not depend on torch on purpose: users pick the
#: build (CPU or a CUDA version) themselves, and resolving shardstream must never pull a multi-GB wheel.
TORCH_INSTALL_HINT = (
    "pip install torch (shardstream deliberately does not depend on torch, so that you choose the "
    "build: CPU-only wheels come from --index-url https://download.pytorch.org/whl/cpu)"
)


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
            f"{purpose} needs the {module!r} package, which is not installed: {install}",
            name=exc.name or module,
        ) from exc


def require_torch(*, purpose: str) -> ModuleType:
    """Import ``torch`` or raise ImportError saying that ``purpose`` needs it and how to install it."""
    return require("torch", purpose=purpose, install=TORCH_INSTALL_HINT)


def in_worker() -> bool:
    """True inside a DataLoader worker process (where torch is imported by definition)."""
    torch_data = sys.modules.get("torch.utils.data")
    return torch_data is not None and torch_data.get_worker_info() is not None


_local = threading.local()


def mark_loader_thread() -> None:
    """Called first on each thread of ``ss.Loader``'s pool (the per-sample stages' threads)."""
    _local.loader = True


def in_loader_thread() -> bool:
    """True on a thread of ``ss.Loader``'s pool: like a DataLoader worker, one of several that
    share the cores, so a stage should not start threads of its own (FFmpeg's, for one)."""
    return getattr(_local, "loader", False)
