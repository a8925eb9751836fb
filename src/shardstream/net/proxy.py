"""Which proxy, if any, each origin goes through: ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``
and ``NO_PROXY`` as curl reads them.

:class:`Proxies` decides per ``(scheme, host, port)``, from the values
:func:`shardstream.config.network_env` read (the one reader of the environment). ``NO_PROXY`` is
decided first, and a proxy URL is parsed and checked only when an origin would go through it: a
value this process cannot use (an unknown scheme, SOCKS without PySocks) fails the reads of those
origins, with a message that names the variable it came from, and never the construction of a
source or the reads of the origins that ``NO_PROXY`` sends directly.

The kinds of proxy, as curl has them (:mod:`.tunnel` connects through each):

- ``http://host:port``: a plain connection to the proxy; ``https://host:port``: TLS to the proxy
  itself, verified with the same CA settings as the origins. Through either, an ``https`` origin
  is reached by a ``CONNECT host:port`` tunnel with TLS to the origin inside it, so the proxy
  never sees the traffic, and a plain ``http`` origin gets its requests in absolute form
  (``GET http://host:port/path``, :func:`absolute_form`), as curl sends them (many proxies refuse
  ``CONNECT`` to ports other than 443).
- ``socks4://``, ``socks4a://``, ``socks5://``, ``socks5h://``: a SOCKS tunnel for every origin,
  through PySocks (the ``[socks]`` extra, imported when a route first needs it). The origin's name
  is resolved here for ``socks4`` and ``socks5``, and by the proxy for ``socks4a`` and ``socks5h``
  (what ``ssh -D`` users want when the names only resolve on the far side).

A proxy URL without a scheme is an ``http://`` one (curl's rule); without a port, the port is 80
for ``http://`` (as requests, urllib3 and botocore have it), 443 for ``https://`` and 1080 for
SOCKS.

``NO_PROXY`` is a comma-separated list of host names (a name also matches its subdomains; a
leading ``.`` or ``*.`` is allowed), ``host:port`` pairs, IP addresses, CIDR ranges, or ``*``
(no proxy at all). Credentials in a proxy URL (``http://user:pass@proxy:3128``) become a
``Proxy-Authorization: Basic`` header for an HTTP(S) proxy, the user name and password of SOCKS5
(RFC 1929) or the user id of SOCKS4, and never appear in a message, a log line or a repr.
"""

from __future__ import annotations

import base64
import importlib
import ipaddress
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit

from ..errors import ShardStreamError

__all__ = ["KINDS", "SOCKS_INSTALL", "ProxyError", "ProxyRoute", "Proxies", "absolute_form", "parse", "shown"]

#: The proxy URL schemes understood, with their default ports.
KINDS = {"http": 80, "https": 443, "socks4": 1080, "socks4a": 1080, "socks5": 1080, "socks5h": 1080}

#: How to get SOCKS support, for the messages.
SOCKS_INSTALL = "pip install 'shardstream[socks]'"


class ProxyError(ShardStreamError, OSError):
    """A proxy cannot be used, or refused or broke a connection. The message names the proxy
    (without credentials), the variable it came from and the origin; the sources translate it
    into a :class:`~shardstream.errors.SourceError` that names the URL too.

    Attributes:
        transient: whether trying again may help (the proxy is down or slow, or could not reach
            the origin this time) rather than a setting to fix (an unusable proxy URL, PySocks
            missing, credentials refused).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, repr=False)
class ProxyRoute:
    """The proxy a connection goes through instead of its origin.

    Attributes:
        kind: the proxy URL's scheme, one of :data:`KINDS`.
        host / port: the proxy.
        variable: the environment variable it came from (``HTTPS_PROXY``, ``ALL_PROXY``, ...),
            as spelled there, for messages.
        username / password: credentials from the proxy URL, or ``None`` (never shown).
    """

    kind: str
    host: str
    port: int
    variable: str
    username: str | None = field(default=None, compare=False)
    password: str | None = field(default=None, compare=False)

    @property
    def shown(self) -> str:
        """The proxy URL without credentials, for messages."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.kind}://{host}:{self.port}"

    @property
    def tls(self) -> bool:
        """Whether the connection to the proxy itself is TLS (an ``https://`` proxy)."""
        return self.kind == "https"

    @property
    def socks(self) -> bool:
        """Whether this is a SOCKS proxy (a tunnel for every origin, plain ``http`` included)."""
        return self.kind.startswith("socks")

    @property
    def absolute(self) -> bool:
        """Whether a plain ``http`` origin's requests go to the proxy in absolute form (an HTTP(S)
        proxy) rather than through a tunnel (SOCKS)."""
        return not self.socks

    @property
    def authorization(self) -> str | None:
        """The ``Proxy-Authorization`` header value of an HTTP(S) proxy with credentials."""
        if self.socks or self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}"
        return "Basic " + base64.b64encode(pair.encode()).decode("ascii")

    def __repr__(self) -> str:
        return f"ProxyRoute({self.shown} from {self.variable})"


def _split(value: str) -> SplitResult:
    text = value.strip()
    return urlsplit(text if "://" in text else "http://" + text)  # curl's default scheme


def shown(value: str) -> str:
    """A proxy URL as messages and reprs show it: scheme, host and port, never credentials."""
    try:
        parts = _split(value)
        port = parts.port
    except ValueError:
        return "(an unparsable proxy URL)"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")


def parse(value: str, variable: str) -> ProxyRoute:
    """The route a proxy URL names, checked for use in this process.

    Raises:
        ProxyError: the URL has an unknown scheme, no host or a bad port, or names a SOCKS proxy
            while PySocks is not installed (the message names ``variable`` and the fix).
    """
    try:
        parts = _split(value)
        port = parts.port
    except ValueError:
        raise ProxyError(
            f"{variable} is set to {shown(value)}, whose port is not a number from 0 to 65535: "
            "use scheme://host:port"
        ) from None
    kind = parts.scheme.lower()
    if kind not in KINDS:
        raise ProxyError(
            f"{variable} names the proxy {shown(value)}, whose scheme {kind}:// is not supported: "
            f"use one of {', '.join(k + '://' for k in KINDS)}"
        )
    if not parts.hostname:
        raise ProxyError(f"{variable} is set to {shown(value)}, which names no host: use {kind}://host:port")
    route = ProxyRoute(
        kind,
        parts.hostname,
        port if port is not None else KINDS[kind],
        variable,
        unquote(parts.username) if parts.username is not None else None,
        unquote(parts.password) if parts.password is not None else None,
    )
    if route.socks:
        try:
            importlib.import_module("socks")
        except ImportError:
            raise ProxyError(
                f"{variable} names the SOCKS proxy {route.shown}, and SOCKS proxies need PySocks, "
                f"which is not installed: {SOCKS_INSTALL}"
            ) from None
    return route


class Proxies:
    """The proxy (or none) of each origin, from ``http_proxy``/``https_proxy``/``no_proxy`` values.

    Args:
        http: proxy URL for ``http://`` origins, or ``None``.
        https: proxy URL for ``https://`` origins, or ``None``.
        no_proxy: the ``NO_PROXY`` list, or ``None``.
        http_variable / https_variable: the variables the two proxy URLs came from (default
            ``HTTP_PROXY`` and ``HTTPS_PROXY``; ``ALL_PROXY`` where that one stood in), named by
            every message about them.
    """

    def __init__(
        self,
        http: str | None = None,
        https: str | None = None,
        no_proxy: str | None = None,
        *,
        http_variable: str = "HTTP_PROXY",
        https_variable: str = "HTTPS_PROXY",
    ) -> None:
        self._values = {"http": (http, http_variable), "https": (https, https_variable)}
        self._bypass = [entry.strip().lower() for entry in (no_proxy or "").split(",") if entry.strip()]
        # scheme -> its route, or why its proxy cannot be used; parsed when first needed
        self._parsed: dict[str, ProxyRoute | str] = {}
        self._known: dict[tuple[str, str, int], ProxyRoute | None] = {}

    def __bool__(self) -> bool:
        return any(value for value, _ in self._values.values())

    def __repr__(self) -> str:
        named = {scheme: f"{shown(v)} ({name})" for scheme, (v, name) in self._values.items() if v}
        return f"Proxies({named}, no_proxy={self._bypass})"

    def route(self, scheme: str, host: str, port: int) -> ProxyRoute | None:
        """The proxy for an origin, or ``None`` to connect directly.

        Raises:
            ProxyError: the origin would go through a proxy that cannot be used (see
                :func:`parse`); origins that ``NO_PROXY`` lists, or whose scheme has no proxy,
                never raise.
        """
        key = (scheme, host, port)
        if key in self._known:
            return self._known[key]
        value, _ = self._values.get(scheme, (None, ""))
        route = None
        if value and not self._bypassed(host.lower(), port):
            route = self._proxy(scheme, host, port)
        self._known[key] = route  # (a race only computes the same answer twice)
        return route

    def _proxy(self, scheme: str, host: str, port: int) -> ProxyRoute:
        parsed = self._parsed.get(scheme)
        if parsed is None:
            value, variable = self._values[scheme]
            assert value
            try:
                parsed = parse(value, variable)
            except ProxyError as exc:
                parsed = str(exc)
            self._parsed[scheme] = parsed
        if isinstance(parsed, str):  # a new error each time: a kept one would grow its traceback
            target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            raise ProxyError(f"cannot reach {target} through a proxy: {parsed} (or list {host} in NO_PROXY)")
        return parsed

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


def absolute_form(request: bytes, scheme: str, host: str, port: int, route: ProxyRoute) -> bytes:
    """A rendered origin-form request (``GET /path HTTP/1.1``) rewritten for an HTTP(S) proxy: the
    target in absolute form, and ``Proxy-Authorization`` when the proxy has credentials."""
    line_end = request.index(b"\r\n")
    method, target, version = request[:line_end].split(b" ", 2)
    default = 443 if scheme == "https" else 80
    origin = f"{scheme}://{host}" + ("" if port == default else f":{port}")
    head = b"%s %s%s %s\r\n" % (method, origin.encode("ascii"), target, version)
    authorization = route.authorization
    if authorization is not None:
        head += f"Proxy-Authorization: {authorization}\r\n".encode("latin-1")
    return head + request[line_end + 2 :]
