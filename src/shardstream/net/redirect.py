"""Following HTTP redirects (301/302/303/307/308) with bounded hops and no credential leaks.

Presigned-URL gateways, CDNs and dataset hubs answer a shard's URL with a redirect. Every request
of a stream (the first one and each resume) starts again at the original URL and follows the
chain, so an expiring signed ``Location`` is never reused, and ``Range``/``If-Match`` go with
every hop. Credentials (the ``headers=`` option, such as ``Authorization``, and ``user:password@``
of the URL) go only to the origin (scheme, host, port) they were given for: once a redirect
leaves that origin they are dropped for the rest of the chain, even if it comes back. Only
``http``/``https`` targets are followed.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urljoin, urlsplit

from ..errors import SourceError, redact_url
from .pool import PooledBody

__all__ = ["REDIRECT_STATUSES", "Send", "basic_auth", "follow_redirects", "origin"]

log = logging.getLogger("shardstream.sources")

#: Statuses that carry a ``Location`` to follow. 303 keeps the method: we only send GET and HEAD.
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

#: ``send(method, url, headers) -> body``: one request, no redirect handling.
Send = Callable[[str, str, Mapping[str, str]], PooledBody]


def origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, with the scheme's default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def basic_auth(url: str) -> dict[str, str]:
    """The ``Authorization: Basic`` header for ``http://user:password@host/...`` (else empty)."""
    parts = urlsplit(url)
    if parts.username is None:
        return {}
    token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return {"Authorization": "Basic " + base64.b64encode(token).decode("ascii")}


def _discard(body: PooledBody) -> None:
    """Drop a redirect's body: read a small one to keep the connection, close a large one."""
    length = body.response.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) <= 65536:
        body.finish()
    else:
        body.close()


def follow_redirects(
    send: Send,
    method: str,
    url: str,
    headers: Mapping[str, str],
    *,
    credentials: Mapping[str, str],
    max_redirects: int,
) -> PooledBody:
    """Send ``method url`` and follow up to ``max_redirects`` redirects; returns the final body.

    Args:
        send: sends one request.
        headers: sent on every hop (``Range``, ``If-Match``, ...).
        credentials: headers sent only while the chain stays on ``url``'s origin.
        max_redirects: hops allowed (0: a redirect is returned as the response).
    """
    current = url
    secret, secret_origin = dict(credentials), origin(url)
    hops = 0
    while True:
        body = send(method, current, {**secret, **headers})
        resp = body.response
        location = resp.getheader("Location")
        if resp.status not in REDIRECT_STATUSES or not location or not max_redirects:
            return body  # a redirect without Location (or not followed) is the caller's error
        target = urljoin(current, location.strip())
        if hops == max_redirects:
            body.close()
            raise SourceError(
                f"cannot open {redact_url(url)}: more than max_redirects={max_redirects} "
                f"redirects (the last to {redact_url(target)}). The server redirects in a loop, or "
                "the chain is longer than allowed: raise max_redirects in storage_options.",
                url=url,
                status=resp.status,
            )
        _discard(body)
        if urlsplit(target).scheme.lower() not in ("http", "https"):
            raise SourceError(
                f"cannot open {redact_url(url)}: HTTP {resp.status} redirects to "
                f"{redact_url(target)}, which is not an http(s) URL; open that URL directly.",
                url=url,
                status=resp.status,
            )
        if secret and origin(target) != secret_origin:
            # Dropped for the rest of the chain, even if it comes back to the first origin.
            log.debug("redirect leaves the origin of %s: credentials are not forwarded", redact_url(url))
            secret = {}
        if urlsplit(location.strip()).username is not None:  # user info the server itself sent
            secret, secret_origin = basic_auth(target), origin(target)
        log.debug("redirect %d %s -> %s", resp.status, redact_url(current), redact_url(target))
        current = target
        hops += 1
