"""One request on a non-blocking connection: its state, and the parsing of its answer.

The parts of :mod:`.multiplex` that know HTTP/1.1 framing: a status line, the headers that frame
the body (``Content-Length``, ``Transfer-Encoding``, ``Connection``), and a body that fits the
connection's buffer or gets one of its own, after its ``Content-Length`` has been checked against
the request's bound (:func:`~.whole.body_limit`: a larger claim is refused before anything is
allocated for it). The loop itself (sockets, ``epoll``, idle
connections) stays in :mod:`.multiplex`.
"""

from __future__ import annotations

import http.client
import ssl
import time
from typing import Any

from ..config import DEFAULT_MAX_BODY
from .idle import Key
from .whole import BodyTooLarge, Connection, Expect, body_limit

__all__ = [
    "CONNECTING",
    "HANDSHAKE",
    "RECEIVING",
    "SENDING",
    "Answer",
    "Job",
    "WOULD_BLOCK",
    "Stale",
    "buffered_body",
    "parse_head",
    "receive",
]

#: Exceptions of a non-blocking socket call that would have had to wait.
WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
#: Job states, in the order a job passes them.
CONNECTING, HANDSHAKE, SENDING, RECEIVING = range(4)


class Answer:
    """One finished request: ``status``, ``head`` (the header block, lower-cased) and ``body``, or
    ``error``; ``sent`` is when its request was all written (``time.monotonic()``, 0 if never)."""

    __slots__ = ("token", "status", "head", "body", "error", "sent")

    def __init__(self, token: Any) -> None:
        self.token = token
        self.status = 0
        self.head = b""
        self.body = b""
        self.error: BaseException | None = None
        self.sent = 0.0

    def __repr__(self) -> str:
        return f"Answer(status={self.status}, bytes={len(self.body)}, error={self.error!r})"


class Job:
    __slots__ = (
        "token", "key", "request", "conn", "state", "mask", "sent", "reused", "head", "body",
        "length", "got", "deadline", "answer", "keep", "expect", "max_body",
    )  # fmt: skip

    def __init__(
        self,
        token: Any,
        key: Key,
        request: bytes,
        expect: Expect | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.token = token
        self.key = key
        self.request = request
        self.expect = expect  # the body sizes the request may take (see whole.Expect)
        self.max_body = max_body
        self.conn: Connection | None = None
        self.state = CONNECTING
        self.mask = 0  # the events watched on the connection
        self.sent = 0
        self.reused = False
        self.head = False  # the status line and headers have been parsed
        self.body: bytearray | None = None  # a body too large for the connection's buffer
        self.length = 0
        self.got = 0
        self.deadline = 0.0
        self.answer = Answer(token)
        self.keep = True


def receive(job: Job, read_timeout: float) -> bool:
    """Read what arrived on ``job``'s connection; True when the answer is complete. A reused
    connection that the server closed before answering raises :class:`Stale`."""
    conn = job.conn
    assert conn is not None
    sock = conn.sock
    while True:
        body = job.body
        try:
            if body is not None:
                with memoryview(body) as view:
                    n = sock.recv_into(view[job.got :])
                job.got += n
            else:
                n = sock.recv_into(conn.view[conn.end :])
                conn.end += n
        except WOULD_BLOCK:
            if job.head:
                job.deadline = time.monotonic() + read_timeout
            return False
        except ConnectionResetError:
            if job.reused and not job.head and conn.end == 0:
                raise Stale() from None
            raise
        if not n:
            if job.reused and not job.head and conn.end == 0:
                raise Stale()
            raise http.client.IncompleteRead(b"", job.length - job.got if job.head else None)
        if not job.head:
            while not job.head:  # (a 1xx answer may be followed by the real one)
                end = conn.buf.find(b"\r\n\r\n", 0, conn.end)
                if end < 0:
                    if conn.end == len(conn.buf):
                        raise http.client.LineTooLong("response headers longer than 64 KiB")
                    break
                if parse_head(job, end):
                    return True
        elif body is not None:
            if job.got == job.length:
                job.answer.body = bytes(body)
                return True
        elif buffered_body(job):
            return True


def buffered_body(job: Job) -> bool:
    """Whether the whole body is in the connection's buffer (then it becomes the answer's)."""
    conn = job.conn
    assert conn is not None
    have = conn.end - conn.start
    if have < job.length:
        return False
    if have > job.length:
        raise http.client.HTTPException("the server sent more bytes than Content-Length")
    job.answer.body = bytes(conn.view[conn.start : conn.end])
    return True


def parse_head(job: Job, end: int) -> bool:
    """Parse the status line and headers ending at ``end``; True when the answer is complete.

    Only the status and the three headers that frame the body are read (by searching the
    lower-cased header block: a dict of every header costs more than the rest of the GET);
    the block itself is kept in ``Answer.head``."""
    conn = job.conn
    assert conn is not None
    answer = job.answer
    head = bytes(conn.view[:end]).lower()
    line_end = head.find(b"\r\n")
    parts = (head if line_end < 0 else head[:line_end]).split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"http/1.") or not parts[1].isdigit():
        raise http.client.BadStatusLine(head[:100].decode("latin-1"))
    status = int(parts[1])
    start = end + 4
    if status < 200:  # 1xx: drop it, the real answer follows
        left = conn.end - start
        conn.view[:left] = conn.view[start : conn.end]
        conn.end = left
        return False
    answer.status = status
    answer.head = head
    connection = field(head, b"\r\nconnection:")
    job.keep = b"close" not in connection and (parts[0] != b"http/1.0" or b"keep-alive" in connection)
    job.head = True
    conn.start = start
    if job.request.startswith(b"HEAD ") or status in (204, 304):
        job.length = 0
    else:
        length = field(head, b"\r\ncontent-length:")
        if not length.isdigit() or b"\r\ntransfer-encoding:" in head:
            raise http.client.HTTPException(
                "an answer without a plain Content-Length is left to the blocking client"
            )
        job.length = int(length)
        limit, expected = body_limit(status, job.expect, job.max_body)
        if job.length > limit:  # refused before a buffer of that size is made
            raise BodyTooLarge(job.length, limit, announced=True, expected=expected)
    if buffered_body(job):
        return True
    if start + job.length > len(conn.buf):  # larger than the buffer: a body of its own
        have = conn.end - start
        job.body = bytearray(job.length)
        job.body[:have] = conn.view[start : conn.end]
        job.got = have
    return False


def field(head: bytes, name: bytes) -> bytes:
    """The value of header ``name`` (``b"\\r\\nname:"``, lower case) in a lower-cased header block."""
    at = head.find(name)
    if at < 0:
        return b""
    at += len(name)
    stop = head.find(b"\r\n", at)
    return (head[at:] if stop < 0 else head[at:stop]).strip()


class Stale(Exception):
    """A reused connection was closed by the server before any answer: send again on a new one."""
