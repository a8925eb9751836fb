"""Connecting through a proxy route (:mod:`.proxy`): TLS to an ``https://`` proxy, ``CONNECT``
tunnels, SOCKS tunnels, and TLS to the origin inside them.

:func:`connect_via` is the one entry the clients use (:mod:`.pool`, :mod:`.whole` and, through
the latter, :mod:`.multiplex`), so every path reaches an origin through a proxy the same way. It
returns a blocking connection with everything before the first request done; the caller sends
requests on it (in absolute form, :func:`~.proxy.absolute_form`, for a plain ``http`` origin
through an HTTP(S) proxy).

Failures that concern the proxy raise :class:`~.proxy.ProxyError`, whose message names the proxy
without credentials, the variable it came from and the origin; the origin's own TLS errors (its
certificate) are raised as the ``ssl`` module raised them, as on a direct connection.
"""

from __future__ import annotations

import importlib
import socket
import ssl
from typing import cast

from .nested_tls import NestedTLSSocket
from .proxy import ProxyError, ProxyRoute

__all__ = ["connect_via", "open_proxy", "open_tunnel", "refusal"]

_MAX_HEAD = 64 << 10  # the proxy's answer to CONNECT, headers included


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _where(route: ProxyRoute) -> str:
    return f"the proxy {route.shown} (from {route.variable})"


def connect_via(
    route: ProxyRoute, scheme: str, host: str, port: int, *, timeout: float, context: ssl.SSLContext
) -> socket.socket:
    """A connection for requests to ``scheme://host:port`` through ``route``.

    A plain ``http`` origin through an HTTP(S) proxy gets the connection to the proxy; any other
    gets a tunnel to the origin (``CONNECT`` or SOCKS), with TLS to the origin inside it for
    ``https`` (inside the TLS to an ``https://`` proxy, too: then the socket is a
    :class:`~.nested_tls.NestedTLSSocket`, which offers the socket calls the clients make).

    Args:
        context: the TLS context of the source: it verifies the origin and an ``https://`` proxy.
    """
    if scheme == "http" and route.absolute:
        return open_proxy(route, _target(host, port), timeout=timeout, context=context)
    sock = open_tunnel(route, host, port, timeout=timeout, context=context)
    if scheme != "https":
        return sock
    try:
        if route.tls:  # TLS inside the TLS to the proxy (open_tunnel gave an SSLSocket)
            # It is not a socket.socket, but it has every call the clients make on one.
            return cast(socket.socket, NestedTLSSocket(cast(ssl.SSLSocket, sock), context, host))
        return context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def open_proxy(route: ProxyRoute, origin: str, *, timeout: float, context: ssl.SSLContext) -> socket.socket:
    """A blocking connection to an HTTP(S) proxy (TLS done for an ``https://`` one), on behalf of
    ``origin`` (``host:port``, for messages)."""
    try:
        sock = socket.create_connection((route.host, route.port), timeout=timeout)
    except OSError as exc:
        raise ProxyError(
            f"cannot connect to {_where(route)} to reach {origin}: {_reason(exc)}; check that the "
            f"proxy runs and that {route.variable} names its host and port",
            transient=True,
        ) from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if route.tls:
            sock = context.wrap_socket(sock, server_hostname=route.host)
        return sock
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        raise ProxyError(
            f"{_where(route)} presented a certificate that does not verify "
            f"({exc.verify_message or exc}); an https:// proxy is checked with the same CAs as the "
            "origins: point REQUESTS_CA_BUNDLE (or verify= in storage_options) at a bundle that "
            "holds its CA"
        ) from exc
    except ssl.SSLError as exc:
        sock.close()
        raise ProxyError(
            f"TLS to {_where(route)} failed ({exc.reason or exc}); if the proxy speaks plain "
            f"HTTP, write http:// in {route.variable}"
        ) from exc
    except BaseException:
        sock.close()
        raise


def open_tunnel(
    route: ProxyRoute, host: str, port: int, *, timeout: float, context: ssl.SSLContext
) -> socket.socket:
    """A blocking connection carrying the bytes of ``host:port``: a ``CONNECT`` tunnel through an
    HTTP(S) proxy (an :class:`ssl.SSLSocket` for an ``https://`` one) or a SOCKS tunnel.

    Raises:
        ProxyError: the proxy could not be reached, refused the tunnel (the message gives its
            answer and what to check) or closed the connection.
    """
    if route.socks:
        return _socks(route, host, port, timeout)
    target = _target(host, port)
    sock = open_proxy(route, target, timeout=timeout, context=context)
    try:
        head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        authorization = route.authorization
        if authorization is not None:
            head += f"Proxy-Authorization: {authorization}\r\n"
        sock.sendall((head + "\r\n").encode("latin-1"))
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk or len(answer) > _MAX_HEAD:
                raise ProxyError(
                    f"{_where(route)} closed the connection before a tunnel to {target}", transient=True
                )
            answer += chunk
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if not 200 <= status < 300:
            raise refusal(route, f"a tunnel to {target}", status, status_line)
        # A proxy sends nothing after its answer until the client speaks: no bytes are lost here.
        return sock
    except BaseException:
        sock.close()
        raise


def refusal(route: ProxyRoute, what: str, status: int, status_line: str) -> ProxyError:
    """The error for an HTTP(S) proxy's refusal of ``what`` (a tunnel, or a request in absolute
    form) with ``status``: what to check, and whether trying again may help."""
    hint = (
        f"check the user and password in the proxy URL ({route.variable})"
        if status == 407
        else "check that the proxy allows this host and port, or list the host in NO_PROXY"
    )
    return ProxyError(
        f"{_where(route)} refused {what}: {status_line!r}; {hint}",
        transient=status >= 500,  # 502/503/504: the proxy could not reach the origin this time
    )


def _socks(route: ProxyRoute, host: str, port: int, timeout: float) -> socket.socket:
    socks = importlib.import_module("socks")  # PySocks; its presence was checked by Proxies.route
    protocol = socks.SOCKS5 if route.kind.startswith("socks5") else socks.SOCKS4
    remote_dns = route.kind in ("socks4a", "socks5h")  # the proxy resolves the origin's name
    target = _target(host, port)
    try:
        tunnel = socks.create_connection(
            (host, port),
            timeout=timeout,
            proxy_type=protocol,
            proxy_addr=route.host,
            proxy_port=route.port,
            proxy_rdns=remote_dns,
            proxy_username=route.username,
            proxy_password=route.password,
        )
    except socks.ProxyConnectionError as exc:
        raise ProxyError(
            f"cannot connect to {_where(route)} to reach {target}: {_reason(exc.socket_err or exc)}; "
            f"check that the proxy runs and that {route.variable} names its host and port",
            transient=True,
        ) from exc
    except socks.SOCKS5AuthError as exc:
        raise ProxyError(
            f"{_where(route)} refused the credentials for a tunnel to {target} ({exc.msg}); check "
            f"the user and password in the proxy URL ({route.variable})"
        ) from exc
    except socks.ProxyError as exc:  # the proxy refused, or could not open, the tunnel
        # Some servers answer wrong credentials by closing the connection, without a status.
        login = f", and the user and password in the proxy URL ({route.variable})" if route.username else ""
        raise ProxyError(
            f"{_where(route)} could not open a tunnel to {target}: {exc.msg}; check that the proxy "
            f"can reach this host and port{login}, or list the host in NO_PROXY",
            transient=True,
        ) from exc
    except OSError as exc:  # the proxy's own name did not resolve
        raise ProxyError(
            f"cannot connect to {_where(route)} to reach {target}: {_reason(exc)}", transient=True
        ) from exc
    # A plain socket from here on: the tunnel is open, and PySocks' socket class overrides calls
    # (timeouts, sends) that the clients then make for plain TCP.
    family, kind, proto = tunnel.family, tunnel.type, tunnel.proto
    sock = socket.socket(family, kind, proto, fileno=tunnel.detach())
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _reason(exc: BaseException) -> str:
    """What went wrong, briefly (``connection refused``, ``timed out``, ...)."""
    if isinstance(exc, socket.gaierror):
        return f"its host name does not resolve ({exc.strerror})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return str(exc) or type(exc).__name__
