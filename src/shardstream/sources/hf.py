"""``hf://`` URLs: files of Hugging Face Hub repos, read through the Hub's ``resolve`` URLs on our
own HTTP client.

URL forms (as ``huggingface_hub.HfFileSystem`` writes them)::

    hf://datasets/{org}/{name}[@{revision}]/{path}
    hf://spaces/{org}/{name}[@{revision}]/{path}
    hf://[models/]{org}/{name}[@{revision}]/{path}      (a model repo)

``revision`` is a branch, tag or commit (default ``main``); ``refs/pr/N`` and ``refs/convert/X``
are written as they are, any other revision with a ``/`` percent-encoded (``@feature%2Fx``).

How a read goes: ``GET {endpoint}/{datasets/}{org}/{name}/resolve/{revision}/{path}`` with the
token answers an LFS file with a 302 to a signed, expiring CDN URL on another host (a small file
is served by the Hub itself). The token goes to the Hub's origin only, never to the CDN. The CDN
URL is cached per file until shortly before its ``Expires`` (or ``X-Amz-Expires``; 5 minutes
when the URL says nothing), so ranged reads and resumes of a file go straight to the CDN; a
cached URL the CDN refuses (403: expired or revoked) is resolved again once. Every request of a
stream is pinned to the file's version as the Hub named it (``X-Linked-Etag``, else ``ETag``):
a file replaced on its branch while it is being read is an ObjectChangedError, not two versions
mixed. Listing uses the tree API (``/api/{type}s/{repo}/tree/{revision}/{path}?recursive=true``),
following its ``Link: rel="next"`` pages.

Why the transport is ours and not ``huggingface_hub``'s: its downloads go to files in its cache
(``hf_hub_download``) or through fsspec's block buffers (``HfFileSystem``), neither of which
streams into our readers with a resume at the exact byte offset, an early ``close()`` that drops
the connection at once, and the retry budget every other source honours. The ``hf`` extra is
therefore not needed to read: the token comes from ``token=``, ``HF_TOKEN`` or the file
``hf auth login`` writes, read here. Writing is not offered: :meth:`HFSource.create` raises
ConfigurationError saying to upload with ``huggingface_hub`` (a Hub commit is not a stream of
bytes: it is an LFS or Xet upload plus a commit, which ``HfApi.upload_folder`` does well).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast
from urllib.parse import quote, urljoin, urlsplit

from ..config import UNSET, store_env
from ..errors import (
    ConfigurationError,
    SourceError,
    TransientSourceError,
    redact_url,
)
from ..forks import ForkSafeLock
from ..net.pool import PooledBody
from ..net.redirect import REDIRECT_STATUSES, follow_redirects, origin
from ._hf_errors import hub_error
from ._hf_paths import HFPath, expiry, find_token, parse_hf_url
from ._resume import EmptyBody, Opened, ResumableReader, range_header
from ._retry import RetryPolicy
from ._status import network_error, status_error
from .base import Listed, ObjectInfo, SourceBase, check_range
from .http import check_max_redirects, content_range_total, network

__all__ = ["HFPath", "HFSource", "parse_hf_url"]

log = logging.getLogger("shardstream.sources")

_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_CACHED_URLS = 4096  # resolved CDN URLs kept (LRU)


@dataclass(frozen=True)
class _Resolved:
    """What the Hub said about a file: where its bytes are and which version they are."""

    location: str | None  # the CDN URL, or None: the Hub serves the file itself
    etag: str | None
    size: int | None
    commit: str | None
    expires: float  # time.monotonic() after which ``location`` is resolved again


def _finish_small(body: PooledBody) -> None:
    """Drop a redirect's body: read a small one to keep the connection, close a large one."""
    length = body.response.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) <= 65536:
        body.finish()
    else:
        body.close()


class HFSource(SourceBase):
    """Reads ``hf://`` URLs (files of Hub repos) with ranged, resumable streams, and lists repo
    folders. Read-only: upload with ``huggingface_hub``.

    Args:
        endpoint: the Hub (default ``HF_ENDPOINT``, else ``https://huggingface.co``); a mirror or
            a test server.
        token: a token string; ``None`` (default) finds one as ``huggingface_hub`` does
            (``HF_TOKEN``, else the file ``hf auth login`` wrote, ``HF_TOKEN_PATH``); ``False``
            sends none; ``True`` finds one even when ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set.
            Sent to the Hub's origin only, never logged or shown.
        connect_timeout, response_timeout, read_timeout: seconds (defaults 10, 20, 60).
        first_byte_deadline: seconds a stream may spend, retries included, before its first byte
            (default 60); once bytes flow, ``retries``/``retry_deadline`` govern.
        verify: ``True`` (``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``, else the system's CAs), a CA
            bundle path, or ``False``. ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` are honoured.
        retries, retry_deadline: the retry budget (defaults ``SHARDSTREAM_RETRIES``,
            ``SHARDSTREAM_RETRY_DEADLINE``).
        max_body: the most bytes a whole read of an object of unknown size takes (``get_into``, a
            manifest, an index; bytes or a size such as ``"4G"``; default ``SHARDSTREAM_MAX_BODY``,
            1 GiB); past it, ResponseTooLargeError.
        max_redirects: redirects followed per request, the one to the CDN included (default 10).
        url_ttl: seconds a resolved CDN URL is reused when it carries no expiry (default 300).
    """

    fork_safe = True  # the pool forgets the parent's connections; the URL cache is plain data
    can_list = True

    #: An open waits for a round trip: ``open_ahead`` starts it on a thread.
    opens_ahead = True

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        token: str | bool | None = None,
        connect_timeout: float = 10.0,
        response_timeout: float = 20.0,
        read_timeout: float = 60.0,
        first_byte_deadline: float = 60.0,
        verify: bool | str = True,
        retries: int | object = UNSET,
        retry_deadline: float | object = UNSET,
        max_body: int | str | object = UNSET,
        max_redirects: int = 10,
        url_ttl: float = 300.0,
    ) -> None:
        env = store_env()
        self.endpoint = (endpoint or env.hf_endpoint).rstrip("/")
        if urlsplit(self.endpoint).scheme not in ("http", "https") or not urlsplit(self.endpoint).hostname:
            raise ConfigurationError(
                f"endpoint={redact_url(self.endpoint)!r} (or HF_ENDPOINT) is not an http(s) URL; "
                "use e.g. https://huggingface.co"
            )
        self._origin = origin(self.endpoint)
        found = find_token(token, env)
        self._auth = {"Authorization": f"Bearer {found}"} if found else {}
        self.policy = RetryPolicy.from_options(
            retries=retries, retry_deadline=retry_deadline, first_byte_deadline=first_byte_deadline
        )
        self.max_redirects = check_max_redirects(max_redirects)
        self.url_ttl = float(url_ttl)
        net = network(
            verify,
            connect_timeout=connect_timeout,
            response_timeout=response_timeout,
            read_timeout=read_timeout,
            max_body=max_body,
        )
        self.max_body = net.max_body
        self.pool = net.pool()
        self._resolved: collections.OrderedDict[HFPath, _Resolved] = collections.OrderedDict()
        self._lock = ForkSafeLock()

    def __repr__(self) -> str:  # never the token
        return f"HFSource(endpoint={redact_url(self.endpoint)!r}, token={'set' if self._auth else None})"

    # -- addresses --------------------------------------------------------------------------------

    def resolve_url(self, where: HFPath) -> str:
        """The Hub's ``resolve`` URL of a file (as ``huggingface_hub.hf_hub_url`` builds it)."""
        return (
            f"{self.endpoint}/{where.repo_page}/resolve/{quote(where.revision, safe='')}/{quote(where.path)}"
        )

    def _parse(self, url: str) -> HFPath:
        where = parse_hf_url(url)
        if not where.path or where.path.endswith("/"):
            raise ConfigurationError(f"cannot open {redact_url(url)}: it names a folder, not a file")
        return where

    # -- the Hub's answers ------------------------------------------------------------------------

    def _hub_error(self, url: str, where: HFPath, body: PooledBody, action: str) -> SourceError:
        """The shardstream error for an error answer of the Hub (its ``X-Error-Code``)."""
        resp = body.response
        status, code = resp.status, resp.getheader("X-Error-Code") or ""
        message = resp.getheader("X-Error-Message") or ""
        body.close()
        return hub_error(
            url,
            where,
            status,
            code,
            message,
            endpoint=self.endpoint,
            with_token=bool(self._auth),
            action=action,
        )

    def _resolve(
        self, url: str, where: HFPath, method: str, headers: dict[str, str]
    ) -> tuple[PooledBody | None, _Resolved, int]:
        """One request to the file's ``resolve`` URL, following redirects on the Hub's origin
        (renamed repos) with the token, and stopping at the first one that leaves it (the CDN).

        Returns ``(body, resolved, hops)``: the body when the Hub serves the file itself (else
        ``None``), what the Hub said about the file (cached), and the redirects followed."""
        current = self.resolve_url(where)
        for hops in range(self.max_redirects + 1):
            body = self.pool.request(method, current, {**self._auth, **headers})
            resp = body.response
            location = resp.getheader("Location")
            if resp.status in REDIRECT_STATUSES and location:
                target = urljoin(current, location.strip())
                if origin(target) == self._origin:
                    _finish_small(body)
                    current = target
                    continue
                size = resp.getheader("X-Linked-Size")
                resolved = _Resolved(
                    location=target,
                    etag=resp.getheader("X-Linked-Etag") or resp.getheader("ETag"),
                    size=int(size) if size and size.isdigit() else None,
                    commit=resp.getheader("X-Repo-Commit"),
                    expires=expiry(target, self.url_ttl),
                )
                _finish_small(body)
                self._remember(where, resolved)
                return None, resolved, hops + 1
            if resp.status >= 300 and resp.status != 416:
                raise self._hub_error(url, where, body, "stat" if method == "HEAD" else "open")
            if resp.status in (206, 416):
                size_of = content_range_total(resp.getheader("Content-Range"))
            else:
                length = resp.getheader("Content-Length")
                size_of = int(length) if length and length.isdigit() else None
            resolved = _Resolved(
                None, resp.getheader("ETag"), size_of, resp.getheader("X-Repo-Commit"), time.monotonic()
            )
            return body, resolved, hops
        raise SourceError(
            f"cannot open {redact_url(url)}: more than max_redirects={self.max_redirects} redirects on "
            f"the Hub ({redact_url(self.endpoint)}); raise max_redirects in storage_options",
            url=url,
        )

    def _remember(self, where: HFPath, resolved: _Resolved) -> None:
        with self._lock:
            self._resolved[where] = resolved
            self._resolved.move_to_end(where)
            while len(self._resolved) > _CACHED_URLS:
                self._resolved.popitem(last=False)

    def _cached(self, where: HFPath) -> _Resolved | None:
        with self._lock:
            found = self._resolved.get(where)
            if found is not None and time.monotonic() >= found.expires:
                del self._resolved[where]
                return None
            return found

    def _forget(self, where: HFPath) -> None:
        with self._lock:
            self._resolved.pop(where, None)

    # -- reading ----------------------------------------------------------------------------------

    def _cdn_get(self, url: str, location: str, headers: dict[str, str], hops: int) -> PooledBody:
        """GET the CDN URL (further redirects followed, without credentials)."""
        if hops > self.max_redirects:
            raise SourceError(
                f"cannot open {redact_url(url)}: the Hub redirects it to its CDN, and "
                f"max_redirects={self.max_redirects} follows none; raise max_redirects",
                url=url,
            )
        return follow_redirects(
            self.pool.request,
            "GET",
            location,
            headers,
            credentials={},
            max_redirects=self.max_redirects - hops,
        )

    def _opener(self, url: str, where: HFPath, end: int | None, offset: int, etag: str | None) -> Opened:
        headers = {"Accept-Encoding": "identity"}
        byte_range = range_header(offset, end)
        if byte_range is not None:
            headers["Range"] = byte_range
        resolved = self._cached(where)
        if resolved is not None and resolved.location is not None:
            body = self._cdn_get(url, resolved.location, headers, 1)
            status = body.response.status
            if 400 <= status < 500 and status != 416:  # expired, revoked or gone: resolve again, once
                log.debug("CDN answered %d for %s: resolving it again", status, redact_url(url))
                body.close()
                self._forget(where)
            else:
                return self._answer(url, body, resolved, offset, fresh=False)
        hub_body, resolved, hops = self._resolve(url, where, "GET", headers)
        if hub_body is not None:
            return self._answer(url, hub_body, resolved, offset, fresh=True)
        assert resolved.location is not None
        return self._answer(
            url, self._cdn_get(url, resolved.location, headers, hops), resolved, offset, fresh=True
        )

    def _answer(self, url: str, body: PooledBody, resolved: _Resolved, offset: int, *, fresh: bool) -> Opened:
        """An :class:`Opened` from the response carrying the bytes (the CDN's or the Hub's), the
        version pinned to what the Hub said (``X-Linked-Etag``)."""
        resp = body.response
        etag = resolved.etag
        if resp.status == 416:
            total = content_range_total(resp.getheader("Content-Range"))
            body.finish()
            return Opened(EmptyBody(), total if total is not None else resolved.size, etag)
        if resp.status >= 300:
            detail = (resp.getheader("X-Error-Message") or "").strip()
            body.close()
            fix = (
                "the Hub's CDN refused a URL the Hub had just signed; check the machine's clock "
                "and any proxy between here and the CDN"
                if fresh and resp.status in (401, 403)
                else ""
            )
            raise status_error(resp.status, url, detail=detail, fix=fix)
        if resp.status == 206:
            size = content_range_total(resp.getheader("Content-Range"))
        else:
            length = resp.getheader("Content-Length")
            size = int(length) if length and length.isdigit() else None
            if offset:
                body.close()
                raise TransientSourceError(
                    f"{redact_url(url)}: the server ignored the Range request (HTTP 200 for a read "
                    f"from byte {offset}); retried",
                    url=url,
                )
        return Opened(body, size if size is not None else resolved.size, etag)

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of an ``hf://`` file (to its end when
        ``length`` is ``None``); transient faults are retried and resumed within the range."""
        where = self._parse(url)
        end = check_range(url, offset, length)
        reader = ResumableReader(
            url,
            functools.partial(self._opener, url, where, end),
            translate=functools.partial(network_error, url=url, endpoint=self.endpoint),
            offset=offset,
            length=length,
            policy=self.policy,
        )
        return cast(BinaryIO, reader)

    def _retrying(self, url: str, action: str, attempt: functools.partial[Any]) -> Any:
        """Run one request of the Hub's API (``attempt``) with the retry budget of a stream."""

        def translated() -> Any:
            try:
                return attempt()
            except SourceError:
                raise
            except Exception as exc:
                raise network_error(exc, url, endpoint=self.endpoint) from exc

        return self.policy.call(translated, f"{action} of {redact_url(url)}")

    def stat(self, url: str) -> ObjectInfo:
        """Size and version from a ``HEAD`` of the ``resolve`` URL (the redirect to the CDN is
        not followed: the Hub's answer carries ``X-Linked-Size`` and ``X-Linked-Etag``)."""
        where = self._parse(url)

        def head() -> ObjectInfo:
            body, resolved, _ = self._resolve(url, where, "HEAD", {"Accept-Encoding": "identity"})
            if body is not None:
                body.finish()
            return ObjectInfo(size=resolved.size, etag=resolved.etag)

        return cast(ObjectInfo, self._retrying(url, "stat", functools.partial(head)))

    # -- listing ----------------------------------------------------------------------------------

    def _page(self, prefix: str, where: HFPath, page_url: str) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the tree API and the URL of the next (``Link: <...>; rel="next"``)."""
        auth = self._auth if origin(page_url) == self._origin else {}
        body = self.pool.request("GET", page_url, {**auth, "Accept": "application/json"})
        resp = body.response
        if resp.status >= 300:
            raise self._hub_error(prefix, where, body, "list")
        try:
            data = json.loads(body.read_all(self.body_limit()))
        finally:
            body.finish()
        if not isinstance(data, list):
            raise SourceError(
                f"cannot list {redact_url(prefix)}: the tree API of {redact_url(self.endpoint)} did not "
                "answer a JSON list; is the endpoint a Hugging Face Hub?",
                url=prefix,
            )
        m = _LINK_NEXT.search(resp.getheader("Link") or "")
        return data, (urljoin(page_url, m.group(1)) if m else None)

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Every file under ``hf://.../folder/`` (recursively, all pages of the tree API); keys
        relative to the folder, sizes, and the LFS sha256 (else the git blob id) as the etag."""
        where = parse_hf_url(prefix)
        folder = where.path.strip("/")
        url: str | None = (
            f"{self.endpoint}/api/{where.repo_type}s/{where.repo_id}/tree/{quote(where.revision, safe='')}"
            + (f"/{quote(folder, safe='')}" if folder else "")
            + "?recursive=true&expand=false"
        )
        base = folder + "/" if folder else ""
        while url is not None:
            page, url = self._retrying(prefix, "list", functools.partial(self._page, prefix, where, url))
            for item in page:
                path = str(item.get("path", ""))
                if item.get("type") != "file" or not path.startswith(base) or path.endswith("/"):
                    continue
                lfs = item.get("lfs") or {}
                size = item.get("size")
                yield Listed(
                    path[len(base) :],
                    int(size) if isinstance(size, int) else -1,
                    str(lfs.get("oid") or item.get("oid") or ""),
                )

    def create(self, url: str) -> BinaryIO:
        """Not offered: always raises ConfigurationError saying how to upload (module doc)."""
        raise ConfigurationError(
            f"cannot write {redact_url(url)}: hf:// is read-only here. Write the shards locally (or to "
            "s3://) and upload them with huggingface_hub: HfApi().upload_folder(repo_id=..., "
            "repo_type='dataset', folder_path=...) or `hf upload`"
        )

    def close(self) -> None:
        self.pool.close()
