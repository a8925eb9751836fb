"""Many whole-body GETs at once from one thread: a pool's connections, non-blocking, on epoll.

With a thread per request in flight, every small GET pays for waking its thread and handing over
the GIL, several times; one thread that writes requests on non-blocking sockets and reads
whichever answers ``epoll`` reports costs a fraction of that (both engines are measured in
``benchmarks/results/bench_objects.md``). This module is that thread's HTTP/1.1 part; the caller
decides what to request and what each answer means (:mod:`.response` parses them).

The connections are the :class:`~.whole.WholeBodyPool`'s: idle ones are taken from it (and given
back when :meth:`Multiplexer.close` is called, blocking again), new ones are connected without
blocking (TCP, then the TLS handshake for ``https``). Only answers with a ``Content-Length`` (or
none, for HEAD/204/304) are read here; anything else (a chunked body, a body ended by the
connection's close, a malformed answer, a timeout, a reset) is delivered as the request's error,
and the caller retries it with the blocking client, which handles every case. A reused connection
that the server had closed is reopened once and the request sent again (GET is idempotent).

Between two uses a loop can be parked on its pool (:meth:`Multiplexer.park`, :func:`borrow`): its
idle connections then stay non-blocking and registered, instead of being switched back to
blocking, unregistered and registered again for the next batch, a round trip of tens of system
calls that a map-style dataset (one short loop per DataLoader batch) would pay every batch. The
pool closes a parked loop with its own connections; a forked child forgets the parent's (closing
only its copies of the descriptors, as the idle pools do).

Linux only (``select.epoll``); :data:`AVAILABLE` says whether it can be used here.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import ssl
import time
import weakref
from typing import Any

from ..forks import at_fork_in_child
from .idle import Key
from .response import CONNECTING, HANDSHAKE, RECEIVING, SENDING, WOULD_BLOCK, Answer, Job, Stale, receive
from .whole import Connection, Expect, WholeBodyPool

__all__ = ["AVAILABLE", "Answer", "Multiplexer", "borrow"]

AVAILABLE = hasattr(select, "epoll")

_IN = getattr(select, "EPOLLIN", 1)
_OUT = getattr(select, "EPOLLOUT", 4)


class Multiplexer:
    """Requests in flight on non-blocking connections of ``pool``, driven by :meth:`wait`.

    Not thread-safe, except :meth:`wake`: one thread submits and waits.
    """

    def __init__(self, pool: WholeBodyPool) -> None:
        if not AVAILABLE:
            raise OSError("Multiplexer needs select.epoll (Linux)")
        self.pool = pool
        self._ep = select.epoll()
        self._jobs: dict[int, Job] = {}  # fd -> the job on that connection
        self._idle: dict[Key, list[Connection]] = {}  # connections between two requests, still watched
        self._idle_fd: dict[int, tuple[Key, Connection]] = {}
        self._addresses: dict[Key, list[Any]] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._ep.register(self._wake_r, _IN)
        self._next_check = 0.0
        self.closed = False
        _LOOPS.add(self)

    def __len__(self) -> int:
        """Requests in flight."""
        return len(self._jobs)

    # -- submitting ---------------------------------------------------------------------------------

    def submit(self, token: Any, key: Key, request: bytes, expect: Expect | None = None) -> Answer | None:
        """Start ``request`` (the whole request's bytes) to ``key`` = (scheme, host, port), its
        body bounded by ``expect`` (else the pool's ``max_body``; see :class:`~.whole.Expect`). Its
        :class:`Answer` comes from a later :meth:`wait`, or at once when it fails to start."""
        job = Job(token, key, request, expect, self.pool.max_body)
        try:
            try:
                if self.pool.proxies:  # absolute form for an http origin through an HTTP(S) proxy
                    job.request = self.pool.for_proxy(key, request)  # (raises for an unusable one)
                self._start(job)
            except Stale:
                self._again(job)
        except Exception as exc:
            self._retire(job, keep=False)
            job.answer.error = exc
            return job.answer
        return None

    def _start(self, job: Job) -> None:
        key = job.key
        idle = self._idle.get(key)
        if idle:
            conn = idle.pop()
            del self._idle_fd[conn.sock.fileno()]
            job.mask = _IN  # idle connections stay watched for reading
        else:
            taken = self.pool.idle.take(key)
            if taken is None:
                self._connect(job)
                return
            conn = taken
            conn.sock.setblocking(False)
            self._ep.register(conn.sock.fileno(), _IN)
            job.mask = _IN
        job.reused = True
        job.conn = conn
        self._jobs[conn.sock.fileno()] = job
        job.state = SENDING
        self._send(job)

    def _again(self, job: Job) -> None:
        """Send ``job`` again on a new connection (its reused one was closed by the server)."""
        self._retire(job, keep=False)
        job.reused = job.head = False
        job.sent = 0
        self._connect(job)

    def _connect(self, job: Job) -> None:
        if self.pool.through_proxy(job.key):
            # Through a proxy the connection (tunnel and TLS included) is set up blocking, once
            # per connection; requests then run on the loop as any other.
            conn = self.pool.connect(job.key)
            conn.sock.setblocking(False)
            job.conn = conn
            job.state = SENDING
            job.deadline = time.monotonic() + self.pool.response_timeout
            self._jobs[conn.sock.fileno()] = job
            self._ep.register(conn.sock.fileno(), _OUT)
            job.mask = _OUT
            return
        scheme, host, port = job.key
        infos = self._addresses.get(job.key)
        if infos is None:  # resolved once per host (blocking, like socket.create_connection)
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            self._addresses[job.key] = infos
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = sock.connect_ex(address)
            if code not in (0, errno.EINPROGRESS):
                raise OSError(code, f"cannot connect to {host}:{port}: {os.strerror(code)}")
        except BaseException:
            sock.close()
            raise
        job.conn = Connection(sock, plain=scheme != "https")
        job.state = CONNECTING
        job.deadline = time.monotonic() + self.pool.connect_timeout
        self._jobs[sock.fileno()] = job
        self._ep.register(sock.fileno(), _OUT)
        job.mask = _OUT

    # -- progress -----------------------------------------------------------------------------------

    def _watch(self, job: Job, mask: int) -> None:
        if job.mask != mask:
            assert job.conn is not None
            self._ep.modify(job.conn.sock.fileno(), mask)
            job.mask = mask

    def _send(self, job: Job) -> None:
        """Write what remains of the request; once it is all written, wait for the answer."""
        conn = job.conn
        assert conn is not None
        try:
            job.sent += conn.sock.send(job.request[job.sent :] if job.sent else job.request)
        except WOULD_BLOCK:
            pass
        except (ConnectionResetError, BrokenPipeError):
            if job.reused:
                raise Stale() from None
            raise
        if job.sent < len(job.request):
            self._watch(job, _OUT)
            return
        job.state = RECEIVING
        job.answer.sent = now = time.monotonic()
        job.deadline = now + self.pool.response_timeout
        conn.start = conn.end = 0
        self._watch(job, _IN)

    def _advance(self, job: Job) -> bool:
        """Move ``job`` on after an event; True when its answer is complete."""
        conn = job.conn
        assert conn is not None
        if job.state == CONNECTING:
            code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, f"cannot connect to {job.key[1]}:{job.key[2]}: {os.strerror(code)}")
            if conn.plain:
                job.state = SENDING
            else:  # the TLS socket keeps the descriptor, so its epoll registration stays
                ctx = self.pool._ssl if self.pool._ssl is not None else ssl.create_default_context()
                conn.sock = ctx.wrap_socket(
                    conn.sock, server_hostname=job.key[1], do_handshake_on_connect=False
                )
                job.state = HANDSHAKE
        if job.state == HANDSHAKE:
            try:
                conn.sock.do_handshake()  # type: ignore[attr-defined]
            except ssl.SSLWantReadError:
                self._watch(job, _IN)
                return False
            except ssl.SSLWantWriteError:
                self._watch(job, _OUT)
                return False
            job.state = SENDING
        if job.state == SENDING:
            self._send(job)
            if job.state != RECEIVING:
                return False
        return receive(job, self.pool.read_timeout)

    # -- waiting ------------------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> list[Answer]:
        """Answers that completed (or failed), waiting up to ``timeout`` seconds for the first
        (``None``: until one completes or :meth:`wake` is called)."""
        wait = 1.0 if timeout is None else min(timeout, 1.0)
        done: list[Answer] = []
        while True:
            events = self._ep.poll(wait)
            woken = False
            for fd, _ in events:
                job = self._jobs.get(fd)
                if job is None:
                    if fd == self._wake_r:
                        woken = True
                        try:
                            while os.read(self._wake_r, 4096):
                                pass
                        except BlockingIOError:
                            pass
                    else:  # an idle connection became readable: the server closed it
                        self._drop_idle(fd)
                    continue
                try:
                    complete = self._advance(job)
                except Stale:
                    try:
                        self._again(job)
                    except Exception as exc:
                        self._retire(job, keep=False)
                        job.answer.error = exc
                        done.append(job.answer)
                    continue
                except Exception as exc:
                    job.answer.error = exc
                    self._retire(job, keep=False)
                    done.append(job.answer)
                    continue
                if complete:
                    self._retire(job, keep=job.keep)
                    done.append(job.answer)
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + 0.5
                for job in [j for j in self._jobs.values() if j.deadline < now]:
                    job.answer.error = TimeoutError(
                        f"no answer from {job.key[1]}:{job.key[2]} within the timeout"
                    )
                    self._retire(job, keep=False)
                    done.append(job.answer)
            if done or woken or timeout is not None:
                return done

    def wake(self) -> None:
        """Make a :meth:`wait` in another thread return (thread-safe; not after :meth:`close`)."""
        if self.closed:
            return
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:  # the pipe is full: a wake is pending anyway
            pass

    def _retire(self, job: Job, *, keep: bool) -> None:
        """The job's connection leaves it: kept idle (still watched) or closed."""
        conn = job.conn
        if conn is None:
            return
        job.conn = None
        fd = conn.sock.fileno()
        self._jobs.pop(fd, None)
        if keep and job.state == RECEIVING:
            conn.start = conn.end = 0
            if job.mask != _IN:
                self._ep.modify(fd, _IN)
            self._idle.setdefault(job.key, []).append(conn)
            self._idle_fd[fd] = (job.key, conn)
            return
        try:
            self._ep.unregister(fd)
        except (OSError, ValueError):
            pass
        conn.close()

    def _drop_idle(self, fd: int) -> None:
        entry = self._idle_fd.pop(fd, None)
        if entry is None:
            return
        key, conn = entry
        self._idle[key].remove(conn)
        self._ep.unregister(fd)
        conn.close()

    def close(self) -> None:
        """Close the connections of requests in flight; give the idle ones back to the pool."""
        if self.closed:
            return
        self.closed = True
        for job in list(self._jobs.values()):
            self._retire(job, keep=False)
        for fd, (key, conn) in list(self._idle_fd.items()):
            self._ep.unregister(fd)
            try:
                if conn.plain:
                    conn.sock.setblocking(True)  # kernel timeouts stay as socket options
                else:
                    conn.sock.settimeout(conn.timeout if conn.timeout >= 0 else None)
            except OSError:
                conn.close()
                continue
            self.pool.idle.give(key, conn)
        self._release()

    def park(self) -> None:
        """Keep this loop on its pool for the next :func:`borrow`, or :meth:`close` it when it
        has requests in flight or another loop is parked there."""
        if self.closed or self._jobs or not self.pool.park(self):
            self.close()

    def _forget(self) -> None:
        """In a forked child: close this process's copies of the descriptors, and nothing else
        (the epoll instance and the sockets' flags are shared with the parent, which uses them)."""
        self.closed = True
        for conn in [job.conn for job in self._jobs.values()] + [c for _, c in self._idle_fd.values()]:
            if conn is not None:
                conn.close()
        self._jobs.clear()
        self._release()

    def _release(self) -> None:
        """Drop the idle connections (closed or handed on by the caller) and close the loop's own
        descriptors: the epoll instance and the wake pipe."""
        self._idle.clear()
        self._idle_fd.clear()
        self._ep.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


#: Every loop of this process: a forked child forgets them all, parked or not.
_LOOPS: weakref.WeakSet[Multiplexer] = weakref.WeakSet()


def borrow(pool: WholeBodyPool) -> Multiplexer:
    """The loop parked on ``pool`` (see :meth:`Multiplexer.park`), or a new one."""
    multi = pool.unpark()
    return multi if isinstance(multi, Multiplexer) else Multiplexer(pool)


def _forget_loops() -> None:
    for multi in list(_LOOPS):
        if multi.pool.parked is multi:
            multi.pool.unpark()
        if not multi.closed:
            multi._forget()
    _LOOPS.clear()


at_fork_in_child(_forget_loops)
