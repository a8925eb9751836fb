"""shardstream's forkserver: a helper process that forks DataLoader workers from a single thread.

Started once per parent process by ``fork + exec`` (safe from a process with any number of
threads), it imports torch and shardstream (and the decoders and clients the parent has loaded),
then forks each worker on request: the worker inherits no lock of the parent's threads. It is an
instance of ``multiprocessing.forkserver.ForkServer`` of its own, so the process-wide forkserver
and its preload list, which the user may use too, are left alone.

What crosses to a worker is pickled as ``multiprocessing`` does for ``spawn``, except that what a
fresh process could not import by name (lambdas, closures, code of the user's script or of
``exec``) travels by value through ``cloudpickle``, and the worker never imports the user's main
module: a script without an ``if __name__ == "__main__":`` guard is not run again in it.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import threading
import types
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util
from typing import Any

__all__ = ["CONTEXT", "ensure_running", "pid", "stop"]

#: Imported once by the server, so that workers start with them loaded.
PRELOAD = (
    "torch",
    "torch.utils.data",
    "cloudpickle",
    "shardstream",
    "shardstream.loader.loader",
    "shardstream.compat",
)
#: Imported by the server too when installed: what a worker of a typical pipeline imports (the
#: decoders, the S3 client: 0.1-0.3 s each per worker otherwise, at every start).
PRELOAD_IF_INSTALLED = {
    "numpy": ("numpy",),
    "PIL": ("PIL.Image", "PIL.JpegImagePlugin", "PIL.PngImagePlugin"),
    "simplejpeg": ("simplejpeg",),
    "msgpack": ("msgpack",),
    "botocore": ("botocore.session", "shardstream.sources.s3"),
}
#: Imported by the server when the parent has them loaded (heavy, and only some pipelines use them).
PRELOAD_IF_LOADED = ("av",)


#: Modules of ours that workers never need (and that import heavy packages: Ray, psutil, tqdm).
_NOT_FOR_WORKERS = ("shardstream.ray", "shardstream.cli", "shardstream.testing")


def _preload() -> list[str]:
    names = [*PRELOAD]
    for root, modules in PRELOAD_IF_INSTALLED.items():
        if root in sys.modules or importlib.util.find_spec(root) is not None:
            names += modules
    names += [name for name in PRELOAD_IF_LOADED if name in sys.modules]
    # Every module of ours the parent uses (other sources, decoders, stages): cheap, and each one
    # would otherwise be imported again by every worker.
    names += sorted(
        name
        for name in list(sys.modules)
        if name.startswith("shardstream.") and not name.startswith(_NOT_FOR_WORKERS)
    )
    return list(dict.fromkeys(names))


class _ByValuePickler(reduction.ForkingPickler):
    """``multiprocessing``'s pickler, sending by value what a fresh process could not import."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (types.FunctionType, type)) and _only_here(obj):
            import cloudpickle

            return cloudpickle.loads, (cloudpickle.dumps(obj),)
        return NotImplemented


def _only_here(obj: Any) -> bool:
    """``obj`` (a function or class) cannot be found by name in another process: it lives in the
    user's script, inside a function, or in code run by ``exec`` (no module to import it from)."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if module_name in (None, "__main__", "__mp_main__") or "<" in qualname:
        return True
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is not obj


class _Popen(popen_forkserver.Popen):
    """Starts a process from shardstream's forkserver, without re-running the user's script."""

    def _launch(self, process_obj: Any) -> None:
        prep = spawn.get_preparation_data(process_obj._name)
        # The child never imports the user's main module: what it needs from there travels by
        # value (see _ByValuePickler), so a script without a __main__ guard is safe.
        prep.pop("init_main_from_name", None)
        prep.pop("init_main_from_path", None)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep, buf)
            _ByValuePickler(buf).dump(process_obj)
        finally:
            context.set_spawning_popen(None)
        ensure_running()
        fds: list[int] = self.__dict__["_fds"]  # set by popen_forkserver.Popen.__init__
        self.sentinel, w = _SERVER.connect_to_new_process(fds)
        parent_w = os.dup(w)  # the child watches it to learn that this parent has gone
        self.finalizer = util.Finalize(self, _UTIL.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(context.ForkServerProcess):
    _start_method = "forkserver"

    @staticmethod
    def _Popen(process_obj: Any) -> Any:  # noqa: N802 - multiprocessing's name
        return _Popen(process_obj)


class _Context(context.ForkServerContext):
    """A ``multiprocessing`` context whose processes come from shardstream's forkserver."""

    _name = "forkserver"
    Process = _Process

    def __repr__(self) -> str:
        return "<shardstream forkserver context>"


#: shardstream's own server: another instance than multiprocessing's, so that its preload list
#: and life do not change the process-wide forkserver the user may also use. (Typed Any: its
#: stop method and PID are not in the stubs.)
_SERVER: Any = forkserver.ForkServer()
_UTIL: Any = util
CONTEXT = _Context()
_server_lock = threading.Lock()


def ensure_running() -> None:
    """Start the server unless it runs (it imports torch and shardstream meanwhile)."""
    with _server_lock:
        # The list (a scan of sys.modules, a few find_spec lookups) is used only when the server
        # starts: compute it then, not at every worker start. A server that died is started again
        # with the list it had.
        if _SERVER._forkserver_pid is None:
            _SERVER.set_forkserver_preload(_preload())
        _SERVER.ensure_running()


def stop() -> None:
    """Stop the server (the workers it started keep running); the next start makes a new one."""
    with _server_lock:
        _SERVER._stop()


def pid() -> int | None:
    """The server's PID, or ``None`` when it is not running."""
    found: int | None = _SERVER._forkserver_pid
    return found
