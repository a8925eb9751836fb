"""How loaders start worker processes: fork when that is safe, a preloaded forkserver when not.

A forked child is a copy of the parent taken at one instant, with only the forking thread in it.
Any lock another thread held at that instant stays held in the child forever: a logging lock, a
gloo or NCCL mutex, the C runtime's loader lock of a thread that is exiting, CPython's own thread
list (gh-112275, fixed in 3.11.10 and 3.12.1). shardstream's own threads obey the fork gate
(:mod:`shardstream.forks`); nobody else's do. So, unless the user chose a start method:

* when :func:`shardstream.forks.foreign_threads` finds none, workers are **forked**: the fast path
  (0.1 s to the first batch), and no less safe than a single-threaded program;
* otherwise they start from **shardstream's forkserver** (``_forkserver.py``: what it preloads,
  and how the dataset reaches the workers without re-running the user's script). Starting the
  server costs the imports (seconds, once, overlapped with the parent's work when :func:`prepare`
  runs early); each worker then costs about what a fork does (``benchmarks/bench_worker_start.py``).

``SHARDSTREAM_WORKER_START`` (``auto``, ``fork``, ``forkserver``, ``spawn``) overrides the rule for
the whole process; ``multiprocessing_context=`` on a loader overrides it for that loader.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
from dataclasses import dataclass
from typing import Any

from ..config import read_settings
from ..errors import ConfigurationError
from ..forks import foreign_threads

__all__ = ["METHODS", "StartChoice", "choose", "prepare", "server_pid", "stop_server", "worker_context"]

log = logging.getLogger(__name__)

#: Values of ``SHARDSTREAM_WORKER_START``.
METHODS = ("auto", "fork", "forkserver", "spawn")


# ------------------------------------------------------------------------------- the rule
@dataclass(frozen=True)
class StartChoice:
    """How a loader starts its workers: ``method`` ("fork", "forkserver" or "spawn"), ``context``
    (for DataLoader's ``multiprocessing_context``; ``None``: the platform default), ``reason`` (for
    logs and the stuck-worker error) and ``given`` (the user chose: leave the loader's context)."""

    method: str
    context: Any
    reason: str
    given: bool = False


def _setting() -> str:
    method = read_settings().worker_start
    if method not in METHODS:
        raise ConfigurationError(
            f"SHARDSTREAM_WORKER_START={method!r} is not a start method; use one of {', '.join(METHODS)}"
        )
    return method


def choose(given: Any = None) -> StartChoice:
    """The start method for workers started now (see the module docstring)."""
    if given is not None:
        name = given if isinstance(given, str) else given.get_start_method()
        return StartChoice(name, given, f"multiprocessing_context={name!r} given", given=True)
    method = _setting()
    if method == "forkserver":
        return StartChoice("forkserver", _server_context(), "SHARDSTREAM_WORKER_START=forkserver")
    if method in ("fork", "spawn"):
        return StartChoice(method, multiprocessing.get_context(method), f"SHARDSTREAM_WORKER_START={method}")
    # The process's start method, without fixing it (get_start_method() would): the platform's
    # default is the first of get_all_start_methods().
    default = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if default != "fork":  # spawn (macOS, Windows) or forkserver (Python 3.14 on Linux): no fork
        return StartChoice(default, None, f"this process's start method ({default})")
    foreign = foreign_threads()
    if foreign:
        return StartChoice(
            "forkserver",
            _server_context(),
            "other threads run in this process: "
            + "; ".join(foreign[:6])
            + (f"; and {len(foreign) - 6} more" if len(foreign) > 6 else ""),
        )
    return StartChoice("fork", multiprocessing.get_context("fork"), "no other thread runs in this process")


def _server_context() -> Any:
    try:
        from . import _forkserver
    except ImportError as exc:  # Windows: no descriptors over sockets, so no forkserver
        raise ConfigurationError(f"shardstream's forkserver is not available here: {exc}") from exc
    return _forkserver.CONTEXT


def prepare() -> None:
    """Start shardstream's forkserver now (it imports torch and shardstream meanwhile)."""
    from . import _forkserver

    _forkserver.ensure_running()


def stop_server() -> None:
    """Stop shardstream's forkserver (its workers keep running); the next start makes a new one."""
    if "shardstream.loader._forkserver" in sys.modules:
        from . import _forkserver

        _forkserver.stop()


def server_pid() -> int | None:
    """PID of shardstream's forkserver, or ``None`` when it is not running."""
    if "shardstream.loader._forkserver" not in sys.modules:
        return None
    from . import _forkserver

    return _forkserver.pid()


def worker_context() -> Any:
    """The ``multiprocessing_context`` to give a plain ``torch.utils.data.DataLoader`` created now:
    fork when no other thread runs in this process, shardstream's forkserver otherwise (create
    the DataLoader after ``init_process_group``). shardstream's loaders choose by themselves."""
    choice = choose()
    if choice.method == "forkserver":
        prepare()
    return choice.context
