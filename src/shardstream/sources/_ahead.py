"""Opening a stream before its turn, so that a request's round trip overlaps other work.

Opening an S3 or HTTP object waits for the server's first answer: a few milliseconds from a
local SeaweedFS (on this project's test machine about as long as the rest of a shard's
transfer), tens of milliseconds from a real object store. A reader that opens each shard only
when the previous one ends spends that wait with nothing else to do. :class:`PendingOpen` starts
the open in a thread of its own now and hands the stream over later, so the reading stage opens
shard ``n + 1`` while it parses shard ``n``; once the response has begun, the kernel's receive
buffer fills with the next shard's first bytes meanwhile.

Only opens run in the thread; reads stay on the consumer's thread. Errors of the open (retries
included, by the stream's own policy) are raised by :meth:`PendingOpen.result`, in the consumer's
thread, where the pipeline's error handler sees them exactly as if the open had happened there.
The open runs inside a busy region of the fork gate (:mod:`shardstream.forks`): a fork waits for
an open in flight (a round trip: milliseconds) instead of copying a pool, a signer or an import
half done into the child.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import BinaryIO

from ..forks import gate

__all__ = ["PendingOpen"]

#: Seconds ``cancel`` waits for an open still in progress before leaving it to finish alone
#: (it then closes its own stream).
CANCEL_WAIT = 2.0


class PendingOpen:
    """``open()`` running in a daemon thread from now on; :meth:`result` waits for its stream.

    Whoever takes the stream with :meth:`result` owns it and closes it. :meth:`cancel` (an early
    stop) closes a stream nobody took, also one that arrives after the cancel.
    """

    def __init__(self, open: Callable[[], BinaryIO], name: str = "shardstream-open-ahead") -> None:  # noqa: A002
        self._open = open
        self._lock = threading.Lock()
        self._stream: BinaryIO | None = None
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread = gate.start(self._run, name)

    def _run(self) -> None:
        with gate.busy():
            try:
                stream = self._open()
            except BaseException as exc:  # handed to the consumer's thread by result()
                self._error = exc
                return
            with self._lock:
                if not self._cancelled:
                    self._stream = stream
                    return
            stream.close()  # cancelled while the open was in progress

    def result(self) -> BinaryIO:
        """The opened stream (waiting for the open to end), or the open's error raised here."""
        self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            try:
                raise error
            finally:
                del error  # no reference cycle through the traceback
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is None:
            raise RuntimeError("PendingOpen.result() called twice or after cancel()")
        return stream

    def cancel(self, wait: float = CANCEL_WAIT) -> None:
        """Close the stream if it was opened and not taken; an open still in progress closes its
        stream itself when it ends. Waits up to ``wait`` seconds for that thread."""
        with self._lock:
            self._cancelled = True
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        self._thread.join(wait)

    @property
    def done(self) -> bool:
        """The open has ended (successfully or not)."""
        return not self._thread.is_alive()
