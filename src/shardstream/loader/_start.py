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
  runs early); each worker then costs about what a fork does (``benchmarks/bench_worker_start.py``);
* except on CPython 3.10.0 to 3.10.8, whose forkserver listens on an abstract Unix socket that any
  local user can connect to and have it unpickle what they send (CVE-2022-42919, fixed in 3.10.9):
  there the rule never picks a forkserver by itself and takes **spawn** (logged once, with the
  reason). :func:`auto_method` is the rule as a pure function of the version and the threads.

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

__all__ = [
    "FORKSERVER_SAFE_FROM",
    "METHODS",
    "StartChoice",
    "auto_method",
    "choose",
    "prepare",
    "server_pid",
    "stop_server",
    "worker_context",
]

log = logging.getLogger(__name__)

#: Values of ``SHARDSTREAM_WORKER_START``.
METHODS = ("auto", "fork", "forkserver", "spawn")
#: The first Python whose forkserver socket only its user can reach: 3.10.0-3.10.8 bind it in
#: the abstract namespace, open to every local user (CVE-2022-42919, gh-97514; ``requires-python``
#: admits them). 3.11 shipped with the fix.
FORKSERVER_SAFE_FROM = (3, 10, 9)
#: This interpreter's version, as :func:`choose` gives it to :func:`auto_method`.
_PYTHON: tuple[int, int, int] = (sys.version_info[0], sys.version_info[1], sys.version_info[2])
_explained: set[str] = set()  # the once-per-process log lines already written


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


def auto_method(version: tuple[int, ...], other_threads: bool) -> str:
    """The start method of the ``auto`` rule where the platform's default is fork: ``"fork"``
    when no other thread runs, else ``"forkserver"`` (shardstream's), or ``"spawn"`` on a Python
    whose forkserver is reachable by other local users (``version`` below
    :data:`FORKSERVER_SAFE_FROM`)."""
    if not other_threads:
        return "fork"
    return "forkserver" if tuple(version[:3]) >= FORKSERVER_SAFE_FROM else "spawn"


def _unsafe_forkserver(version: tuple[int, ...]) -> str:
    shown = ".".join(map(str, version[:3]))
    return (
        f"the forkserver of Python {shown} listens on a socket any local user can reach (CVE-2022-42919, "
        "fixed in 3.10.9)"
    )


def _explain_once(key: str, message: str) -> None:
    if key not in _explained:
        _explained.add(key)
        log.warning("%s", message)


def choose(given: Any = None) -> StartChoice:
    """The start method for workers started now (see the module docstring)."""
    if given is not None:
        name = given if isinstance(given, str) else given.get_start_method()
        return StartChoice(name, given, f"multiprocessing_context={name!r} given", given=True)
    method = _setting()
    if method == "forkserver":
        if _PYTHON < FORKSERVER_SAFE_FROM:  # the user's choice, but not a silent one
            _explain_once(
                "explicit",
                f"SHARDSTREAM_WORKER_START=forkserver: {_unsafe_forkserver(_PYTHON)}; upgrade Python, or "
                "use fork or spawn on a machine shared with other users",
            )
        return StartChoice("forkserver", _server_context(), "SHARDSTREAM_WORKER_START=forkserver")
    if method in ("fork", "spawn"):
        return StartChoice(method, multiprocessing.get_context(method), f"SHARDSTREAM_WORKER_START={method}")
    # The process's start method, without fixing it (get_start_method() would): the platform's
    # default is the first of get_all_start_methods().
    default = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if default != "fork":  # spawn (macOS, Windows) or forkserver (Python 3.14 on Linux): no fork
        return StartChoice(default, None, f"this process's start method ({default})")
    foreign = foreign_threads()
    method = auto_method(_PYTHON, bool(foreign))
    if method == "fork":
        return StartChoice(
            "fork", multiprocessing.get_context("fork"), "no other thread runs in this process"
        )
    threads = (
        "other threads run in this process: "
        + "; ".join(foreign[:6])
        + (f"; and {len(foreign) - 6} more" if len(foreign) > 6 else "")
    )
    if method == "spawn":
        why = f"spawn, not shardstream's forkserver: {_unsafe_forkserver(_PYTHON)}"
        _explain_once(
            "auto",
            f"workers start with {why}. Spawned workers import the main module again and need a "
            "picklable dataset (no lambdas); Python 3.10.9 or later restores the forkserver",
        )
        return StartChoice("spawn", multiprocessing.get_context("spawn"), f"{threads}; {why}")
    return StartChoice("forkserver", _server_context(), threads)


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
    fork when no other thread runs in this process, shardstream's forkserver otherwise (spawn on
    Python 3.10.0-3.10.8; see :func:`auto_method`); create the DataLoader after
    ``init_process_group``. shardstream's loaders choose by themselves."""
    choice = choose()
    if choice.method == "forkserver":
        prepare()
    return choice.context
