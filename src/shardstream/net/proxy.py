"""HTTP proxies as curl and botocore use them: ``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``.

:class:`Proxies` decides, per ``(scheme, host, port)``, whether a connection goes through a proxy
(the values come from :func:`shardstream.config.network_env`, the one reader of the
environment). Through a proxy:

- an ``https`` origin is reached by a ``CONNECT host:port`` tunnel (:func:`open_tunnel`), then TLS
  to the origin inside it, so the proxy never sees the traffic;
- a plain ``http`` origin gets its requests in absolute form (``GET http://host:port/path``) on a
  connection to the proxy (:func:`absolute_form`), as curl does (many proxies refuse ``CONNECT``
  to ports other than 443).

``NO_PROXY`` is a comma-separated list of host names (a name also matches its subdomains; a
leading ``.`` or ``*.`` is allowed), ``host:port`` pairs, IP addresses, CIDR ranges, or ``*``
(no proxy at all). Credentials in a proxy URL (``http://user:pass@proxy:3128``) become a
``Proxy-Authorization: Basic`` header and never appear in a log line or an error.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError

__all__ = ["ProxyError", "ProxyRoute", "Proxies", "absolute_form", "open_tunnel"]

_MAX_HEAD = 64 << 10  # the proxy's answer to CONNECT, headers included


class ProxyError(OSError):
    """The proxy refused or broke a tunnel (names the proxy without its credentials)."""


@dataclass(frozen=True)
class ProxyRoute:
    """Where a connection goes instead of its origin.

    Attributes:
        host / port: the proxy (an ``http://`` proxy: TLS to the proxy itself is not supported).
        authorization: the ``Proxy-Authorization`` header value, or ``None``.
        shown: the proxy URL without credentials, for messages.
    """

    host: str
    port: int
    authorization: str | None
    shown: str

    def __repr__(self) -> str:
        return f"ProxyRoute({self.shown})"


def _route(url: str, variable: str) -> ProxyRoute:
    if "://" not in url:
        url = "http://" + url  # curl's default scheme for a proxy
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or not parts.hostname:
        shown = f"{parts.scheme}://{parts.hostname}:{parts.port}" if parts.hostname else "?"
        raise ConfigurationError(
            f"{variable} names the proxy {shown}: only http:// proxies are supported (a CONNECT "
            "tunnel carries TLS to the origin); use http://host:port"
        )
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    port = parts.port or 80
    return ProxyRoute(parts.hostname, port, auth, f"http://{parts.hostname}:{port}")


class Proxies:
    """The proxy (or none) of each origin, from ``http_proxy``/``https_proxy``/``no_proxy`` values.

    Args:
        http: proxy URL for ``http://`` origins (``HTTP_PROXY``), or ``None``.
        https: proxy URL for ``https://`` origins (``HTTPS_PROXY``), or ``None``.
        no_proxy: the ``NO_PROXY`` list, or ``None``.
    """

    def __init__(
        self, http: str | None = None, https: str | None = None, no_proxy: str | None = None
    ) -> None:
        self._routes = {
            "http": _route(http, "HTTP_PROXY") if http else None,
            "https": _route(https, "HTTPS_PROXY") if https else None,
        }
        self._bypass = [entry.strip().lower() for entry in (no_proxy or "").split(",") if entry.strip()]
        self._known: dict[tuple[str, str, int], ProxyRoute | None] = {}

    def __bool__(self) -> bool:
        return any(self._routes.values())

    def __repr__(self) -> str:
        shown = {k: v.shown for k, v in self._routes.items() if v is not None}
        return f"Proxies({shown}, no_proxy={self._bypass})"

    def route(self, scheme: str, host: str, port: int) -> ProxyRoute | None:
        """The proxy for an origin, or ``None`` to connect directly."""
        key = (scheme, host, port)
        if key in self._known:
            return self._known[key]
        route = self._routes.get(scheme)
        if route is not None and self._bypassed(host.lower(), port):
            route = None
        self._known[key] = route  # (a race only computes the same answer twice)
        return route

    def _bypassed(self, host: str, port: int) -> bool:
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            address = None
        for entry in self._bypass:
            if entry == "*":
                return True
            name, want_port = entry, None
            if entry.count(":") == 1 and entry.rsplit(":", 1)[1].isdigit():  # host:port (not IPv6)
                name, port_text = entry.rsplit(":", 1)
                want_port = int(port_text)
            if want_port is not None and want_port != port:
                continue
            if address is not None:
                try:
                    if address in ipaddress.ip_network(name.strip("[]"), strict=False):
                        return True
                except ValueError:
                    pass
                continue
            name = name.removeprefix("*").lstrip(".")
            if host == name or host.endswith("." + name):
                return True
        return False


def open_tunnel(route: ProxyRoute, host: str, port: int, timeout: float) -> socket.socket:
    """A blocking socket to ``host:port`` through ``route``'s ``CONNECT`` tunnel.

    Raises:
        ProxyError: the proxy answered anything but 2xx (the message names the proxy, the
            origin and the status, and says what to check), or closed the connection.
        OSError: the proxy could not be reached.
    """
    sock = socket.create_connection((route.host, route.port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        if route.authorization is not None:
            head += f"Proxy-Authorization: {route.authorization}\r\n"
        sock.sendall((head + "\r\n").encode("latin-1"))
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk or len(answer) > _MAX_HEAD:
                raise ProxyError(f"the proxy {route.shown} closed the connection before a tunnel to {target}")
            answer += chunk
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if not 200 <= status < 300:
            hint = (
                "check the user and password in the proxy URL (HTTPS_PROXY)"
                if status == 407
                else "check that the proxy allows CONNECT to this host and port, or list the host in NO_PROXY"
            )
            raise ProxyError(f"the proxy {route.shown} refused a tunnel to {target}: {status_line!r}; {hint}")
        # A proxy sends nothing after its answer until the client speaks: no bytes are lost here.
        return sock
    except BaseException:
        sock.close()
        raise


def absolute_form(request: bytes, scheme: str, host: str, port: int, route: ProxyRoute) -> bytes:
    """A rendered origin-form request (``GET /path HTTP/1.1``) rewritten for a proxy: the target
    in absolute form, and ``Proxy-Authorization`` when the proxy has credentials."""
    line_end = request.index(b"\r\n")
    method, target, version = request[:line_end].split(b" ", 2)
    default = 443 if scheme == "https" else 80
    origin = f"{scheme}://{host}" + ("" if port == default else f":{port}")
    head = b"%s %s%s %s\r\n" % (method, origin.encode("ascii"), target, version)
    if route.authorization is not None:
        head += f"Proxy-Authorization: {route.authorization}\r\n".encode("latin-1")
    return head + request[line_end + 2 :]
