"""``DirectoryShardList``: shards claimed from a directory by any number of concurrent readers.

WebDataset 1.0.2's design, with its file-name protocol, so that readers of both libraries can
share one directory: a reader claims a shard by renaming ``name`` to ``name._<pid>_`` (an atomic
``rename``: of two readers racing for one shard, exactly one succeeds and the other picks
again), yields ``{"url": claimed_name}``, and when the consumer asks for the next shard recycles
the one it had, by ``mode``:

* ``"resample"`` (default): renamed back to its name, so it can be claimed again (endless);
* ``"unlink"``: deleted (each shard read once, by one reader);
* ``"keep"``: renamed ``<name without its last extension>._done_``.

A claimed shard whose process no longer runs is recycled by the next reader that finishes a shard
(same host: the PID is checked with ``kill(pid, 0)``). A shard whose consumer stops early stays
claimed until its process exits.

Unlike WebDataset, each item also carries ``"stream"``, the claimed file opened at claim time:
shardstream's reader takes the next shard from its shard list while it starts the current one
(read-ahead), which recycles the current shard before it is read; the open stream reads on after
a rename or an unlink (POSIX). The reader closes it; code that uses only ``"url"`` can close it.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Generator
from typing import Any

from ..errors import ConfigurationError
from ..pipeline.iterable import IterableDatasetBase
from .utils import glob_with_braces

__all__ = ["DirectoryShardList", "check_pid_is_running", "get_pid_from_filename", "without_last_extension"]

log = logging.getLogger(__name__)


def check_pid_is_running(pid: int) -> bool:
    """True when a process with this PID exists (on this host)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # it exists, owned by another user
    except OSError:
        return False
    return True


def without_last_extension(fname: str) -> str:
    """``"a/b.tar._123_"`` -> ``"a/b.tar"``: the name without its last ``.``-suffix."""
    return re.sub(r"\.[^.]*$", "", fname)


def get_pid_from_filename(fname: str) -> int | None:
    """The PID of a claimed name ``<name>._<pid>_``, or None."""
    match = re.match(r"^(.*)\._(\d+)_$", fname)
    return int(match.group(2)) if match else None


class DirectoryShardList(IterableDatasetBase[dict[str, Any]]):
    """Yield ``{"url", "stream"}`` for shards claimed one at a time from directory ``path``.

    Args:
        path: the directory, ending in ``/``.
        pattern: glob pattern (braces allowed) of the shard names. Default ``"*.{tar,tgz,tar.tgz}"``.
        poll: seconds to wait before looking again when no shard is free; ``None`` ends the
            iteration instead. Default 1.
        timeout: seconds after which the iteration ends. Default 1e12.
        mode: what happens to a shard once read: ``"resample"``, ``"unlink"`` or ``"keep"``.
        select: which free shard to claim: ``"random"`` or ``"oldest"`` (by mtime).
        fate: unused (WebDataset's argument).
    """

    def __init__(
        self,
        path: str,
        pattern: str = "*.{tar,tgz,tar.tgz}",
        poll: float | None = 1,
        timeout: float = 1e12,
        mode: str = "resample",
        select: str = "random",
        fate: Any = None,
    ) -> None:
        if not path.endswith("/"):
            raise ConfigurationError(f"DirectoryShardList: path={path!r} must end with '/'")
        if not os.path.isdir(path):
            raise ConfigurationError(f"DirectoryShardList: {path!r} is not a directory")
        if mode not in ("resample", "unlink", "keep"):
            raise ConfigurationError(f"DirectoryShardList: mode={mode!r}; use 'resample', 'unlink' or 'keep'")
        if select not in ("random", "oldest"):
            raise ValueError(f"unknown selection strategy {select}")
        self.path = path
        self.pattern = pattern
        self.poll = poll
        self.timeout = timeout
        self.mode = mode
        self.select = select
        self.fate = fate

    def recycle(self, activename: str) -> None:
        """Release a claimed shard according to ``mode``."""
        if self.mode == "unlink":
            os.unlink(activename)
        elif self.mode == "keep":
            os.rename(activename, without_last_extension(activename) + "._done_")
        else:
            os.rename(activename, without_last_extension(activename))

    def cleanup_files_without_processes(self) -> None:
        """Recycle shards claimed by processes that no longer run."""
        for fname in glob_with_braces(os.path.join(self.path, "*._*_")):
            pid = get_pid_from_filename(fname)
            if pid is None or check_pid_is_running(pid):
                continue
            try:
                self.recycle(fname)
            except FileNotFoundError:
                continue  # another reader recycled it first
            log.info("recycled %s, claimed by process %d, which no longer runs", fname, pid)

    def __iter__(self) -> Generator[dict[str, Any], None, None]:
        start = time.time()
        while time.time() - start < self.timeout:
            candidates = sorted(glob_with_braces(self.path + self.pattern))
            if not candidates:
                if self.poll is None:
                    return
                time.sleep(self.poll)
                continue
            if self.select == "oldest":
                candidate = min(candidates, key=_mtime)
            else:
                candidate = random.choice(candidates)
            activename = f"{candidate}._{os.getpid()}_"
            try:
                os.rename(candidate, activename)  # the claim: atomic, one reader wins
            except FileNotFoundError:
                continue  # claimed by another reader in the meantime: choose again
            try:
                stream = open(activename, "rb")  # noqa: SIM115 - closed by the reader (see the docstring)
            except FileNotFoundError:
                continue  # released by a cleanup of another reader in the meantime
            yield {"url": activename, "stream": stream}
            self.recycle(activename)
            self.cleanup_files_without_processes()


def _mtime(fname: str) -> float:
    try:
        return os.stat(fname).st_mtime
    except FileNotFoundError:
        return float("inf")  # claimed by another reader while we looked
