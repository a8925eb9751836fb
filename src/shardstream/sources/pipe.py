"""``pipe:COMMAND`` URLs: read a shell command's stdout, or write to its stdin. Opt-in only.

Stopping early is normal (a ``break``, ``with_epoch``, a DataLoader shutting down): ``close()``
then closes the pipe, terminates the command's whole process group and reaps it, and the
command's complaints (``[Errno 32] Broken pipe``, ``download failed``) stay in our capture buffer
instead of the terminal. The exit status is checked only when the output was read to the end;
a failing status raises :class:`~shardstream.errors.PipeCommandError` with the status and the
tail of the command's stderr.

Ranged reads cannot seek: ``open(url, offset=o, length=n)`` runs the command, reads and discards
its first ``o`` bytes, then stops after ``n`` bytes (closing the stream stops the command). A
missing object is reported by the command's exit status, so it surfaces as PipeCommandError when
the output ends, not at ``open``; a range that stops before the output ends never checks it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
from collections.abc import Iterable
from typing import IO, BinaryIO, cast

from ..errors import ConfigurationError, PipeCommandError, redact_url
from ..forks import gate
from .base import ObjectInfo, PublishingWriter, SourceBase, check_range
from .ranges import limit

__all__ = ["PipeReader", "PipeSource", "PipeWriter", "pipe_command"]

log = logging.getLogger("shardstream.sources")


def pipe_command(url: str) -> str:
    """The shell command of a ``pipe:`` URL."""
    if not url.startswith("pipe:") or not url[5:].strip():
        raise ConfigurationError(
            f"{redact_url(url)!r} is not a pipe URL; expected pipe:COMMAND, e.g. pipe:cat shard.tar"
        )
    return url[5:]


class _Tail:
    """Drains a pipe on a thread, keeping only its last ``limit`` bytes."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._data = bytearray()
        # Started and run through the fork gate (see shardstream.forks): a fork never overlaps its start
        # or its appends; it waits in the read, holding nothing.
        self._thread = gate.start(self._drain, name="pipe-stderr")

    def _drain(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := self._stream.read(4096):
                with gate.busy():
                    self._data += chunk
                    if len(self._data) > 2 * self._limit:
                        del self._data[: -self._limit]

    def text(self, timeout: float = 5.0) -> str:
        """The captured tail once the pipe closed (waits up to ``timeout`` s for the writer)."""
        self._thread.join(timeout)
        with contextlib.suppress(OSError):
            self._stream.close()
        return bytes(self._data[-self._limit :]).decode("utf-8", "replace")


def _status_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"status {code}"


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate the command's process group and reap it (SIGKILL if SIGTERM is ignored)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Grandchildren that outlived the shell are in the same group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class _PipeBase(io.RawIOBase):
    def __init__(self, url: str, ok: frozenset[int], tail: int, timeout: float, *, write: bool) -> None:
        super().__init__()
        self.url = redact_url(url)
        self._command = pipe_command(url)
        self._ok = ok
        self._timeout = timeout
        # A new session: the command and anything it starts form one process group, so close()
        # can stop all of them, and a Ctrl-C aimed at us does not make the command print noise.
        self._proc = subprocess.Popen(
            self._command,
            shell=True,
            stdin=subprocess.PIPE if write else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if write else subprocess.PIPE,
            bufsize=0,
            start_new_session=True,
        )
        captured = self._proc.stdout if write else self._proc.stderr
        assert captured is not None
        self._tail = _Tail(captured, tail)
        self.returncode: int | None = None

    def _error(self, status: int, what: str, fix: str) -> PipeCommandError:
        self.returncode = status
        shown = self._tail.text(self._timeout).strip()[-2000:] or "(nothing on stderr)"
        return PipeCommandError(
            f"the command of {self.url} exited with {_status_text(status)}{what}. Its stderr ended "
            f"with:\n{shown}\n{fix}",
            url=self.url,
            status=status,
        )

    def _check(self, status: int) -> None:
        if status in self._ok:
            self.returncode = status
            self._tail.text(self._timeout)
            return
        raise self._error(
            status, "", "Fix the command (run it in a shell to see why); if this status is expected, "
            f"add it to storage_options={{'ignore_status': [{status}]}}.",
        )  # fmt: skip

    def _kill(self) -> None:
        _stop(self._proc, self._timeout)
        self.returncode = self._proc.returncode
        self._tail.text(self._timeout)


class PipeReader(_PipeBase):
    """The stdout of a running command, as a read-only binary stream."""

    def __init__(self, url: str, *, ok: frozenset[int], tail: int, timeout: float) -> None:
        super().__init__(url, ok, tail, timeout, write=False)
        assert self._proc.stdout is not None
        self._stdout = self._proc.stdout
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError(f"read from a closed stream ({self.url})")
        if self._eof:
            return 0
        n = self._stdout.readinto(buffer)  # type: ignore[attr-defined]
        if not n and len(buffer):
            self._eof = True
            self._stdout.close()
            self._check(self._proc.wait())
        return int(n or 0)

    def close(self) -> None:
        """Stop reading now: an early close ends the command quietly; nothing is left running."""
        if self.closed:
            return
        try:
            if not self._eof:
                with contextlib.suppress(OSError):
                    self._stdout.close()
                self._kill()
        finally:
            super().close()


class PipeWriter(PublishingWriter, _PipeBase):
    """The stdin of a running command, as a write-only binary stream; ``close()`` checks its status."""

    def __init__(self, url: str, *, ok: frozenset[int], tail: int, timeout: float) -> None:
        super().__init__(url, ok, tail, timeout, write=True)
        assert self._proc.stdin is not None
        self._stdin = self._proc.stdin

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError(f"write to a closed stream ({self.url})")
        try:
            return int(self._stdin.write(data) or 0)
        except BrokenPipeError as exc:  # the command exited before taking all input
            with contextlib.suppress(OSError):
                self._stdin.close()
            error = self._error(
                self._proc.wait(), " before reading all of its input",
                "The data written so far may be incomplete; fix the command (run it in a shell to see why).",
            )  # fmt: skip
            super().close()
            raise error from exc

    def close(self) -> None:
        """Close the command's stdin, wait for it to finish and check its exit status."""
        if self.closed:
            return
        try:
            with contextlib.suppress(BrokenPipeError):
                self._stdin.close()
            self._check(self._proc.wait())
        finally:
            super().close()

    def abort(self) -> None:
        """Stop the command without waiting for it to finish; its status is not checked."""
        if not self.closed:
            with contextlib.suppress(OSError):
                self._stdin.close()
            self._kill()
            super().close()


class PipeSource(SourceBase):
    """Runs ``pipe:`` commands through the shell. Only reachable with ``allow_pipe=True``.

    Args:
        ignore_status: exit statuses treated as success besides 0, per dataset (e.g. ``[141]``
            for a command that reports SIGPIPE as a status).
        stderr_tail: bytes of the command's stderr kept for error messages (default 8192).
        terminate_timeout: seconds to wait after SIGTERM before SIGKILL (default 5).
    """

    def __init__(
        self, *, ignore_status: Iterable[int] = (), stderr_tail: int = 8192, terminate_timeout: float = 5.0
    ) -> None:
        self.ok = frozenset({0, *ignore_status})
        self.stderr_tail = stderr_tail
        self.terminate_timeout = terminate_timeout

    def __repr__(self) -> str:
        return f"PipeSource(ignore_status={sorted(self.ok - {0})})"

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Start the command and return its stdout from byte ``offset``, capped at ``length`` bytes.

        A pipe cannot seek: the first ``offset`` bytes are read and discarded (their cost is paid
        in full), and reading stops after ``length`` bytes.
        """
        check_range(url, offset, length)
        reader = PipeReader(url, ok=self.ok, tail=self.stderr_tail, timeout=self.terminate_timeout)
        if length is None:
            log.info("open %s offset=%d size=None", reader.url, offset)
        else:
            log.info("open %s offset=%d size=None length=%d", reader.url, offset, length)
        try:
            left = offset
            buf = bytearray(min(offset, 1 << 20))
            while left:
                n = reader.readinto(memoryview(buf)[: min(left, len(buf))])
                if not n:
                    break
                left -= n
        except BaseException:
            reader.close()
            raise
        return limit(cast(BinaryIO, reader), length)

    def stat(self, url: str) -> ObjectInfo:
        """A pipe's size is unknown until it has been read."""
        pipe_command(url)
        return ObjectInfo(size=None)

    def create(self, url: str) -> BinaryIO:
        """Start the command and return its stdin; ``close()`` waits and checks the exit status."""
        writer = PipeWriter(url, ok=self.ok, tail=self.stderr_tail, timeout=self.terminate_timeout)
        log.info("create %s", writer.url)
        return cast(BinaryIO, writer)

    def close(self) -> None:
        pass
