"""``gs://bucket/key`` (and ``gcs://``) URLs: Google Cloud Storage's JSON API on our own HTTP client.

Reads are media downloads (``GET /download/storage/v1/b/{bucket}/o/{key}?alt=media``, what
Google's client libraries send) streamed on :mod:`shardstream.net.pool` through
:class:`~._resume.ResumableReader`: ranged reads, a cut connection resumed at its byte offset,
``close()`` that drops the connection at once. The first answer's generation (``X-Goog-Generation``)
pins every resume: it is sent as ``ifGenerationMatch`` (GCS answers 412 for a replaced object) and
compared with the generation of the resumed answer (fake-gcs-server ignores ``ifGenerationMatch``
on downloads; the comparison catches a replaced object there too), so a resume never mixes two
versions. Whole small objects and byte ranges (``get_into``; ``get_many``, one thread on
``epoll`` as for S3, :mod:`._epoll_gets`) take the leaner :mod:`shardstream.net.whole`
client. ``stat`` and listing read the JSON metadata; writes are resumable uploads
(:mod:`._gcs_writer`). Credentials: :mod:`._gcs_auth`.

Everything after ``gs://bucket/`` is the key (``?``, ``#``, ``%``, spaces and non-ASCII text
included), percent-encoded whole on the wire. The ``generation`` of an object plays the role of
an ETag everywhere here (stat, listing, streams, ``get_into``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import BinaryIO, cast
from urllib.parse import quote, urlsplit

from ..config import UNSET, store_env
from ..errors import ConfigurationError, ObjectChangedError, SourceError, TransientSourceError, redact_url
from ..net.idle import Key
from ..net.multiplex import AVAILABLE as MULTIPLEX_AVAILABLE
from ..net.pool import PooledBody
from ._epoll_gets import EpollGets, expect, settle_range
from ._gcs_auth import GCSAuth
from ._gcs_errors import error_detail, gcs_error
from ._gcs_writer import GCSWriter
from ._resume import Opened, ResumableReader, range_header
from ._retry import RetryPolicy
from ._status import network_error
from .base import Listed, ObjectInfo, SourceBase, check_range
from .http import beyond_end, content_range_total, network
from .many import ManyGets

__all__ = ["GCSSource", "parse_gs_url"]

GOOGLE_ENDPOINT = "https://storage.googleapis.com"
_CHUNK_UNIT = 256 << 10  # resumable upload chunks are multiples of 256 KiB


def parse_gs_url(url: str, *, key_required: bool = True) -> tuple[str, str]:
    """``(bucket, key)`` of ``gs://bucket/key`` or ``gcs://bucket/key``: the key is everything
    after the bucket's ``/``, taken whole."""
    scheme, sep, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    if not sep or scheme.lower() not in ("gs", "gcs") or not bucket or (key_required and not key):
        raise ConfigurationError(
            f"{redact_url(url)!r} is not a gs://bucket/key URL; write gs://my-bucket/path/to/object"
        )
    return bucket, key


def _origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80)


class GCSSource(SourceBase):
    """Reads, lists and writes ``gs://`` URLs for one set of credentials and one endpoint.

    Args:
        endpoint_url: the JSON API's address (default: ``STORAGE_EMULATOR_HOST`` when set, else
            ``https://storage.googleapis.com``).
        token: what gcsfs's ``token=`` takes: ``"anon"`` (no credentials, public buckets),
            ``"google_default"``, ``"cloud"`` (the metadata server), the path of a JSON key file,
            the key file's JSON text or a dict of it, a ``google.auth`` Credentials object, or an
            OAuth2 access token (default: none with an emulator, else application default
            credentials). Never logged or shown: messages name its kind (see
            :mod:`._gcs_auth`).
        project: quota project for application default credentials.
        verify: TLS checks: ``True`` (``REQUESTS_CA_BUNDLE`` / system CAs), a CA bundle path, or
            ``False``. ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` are honoured.
        connect_timeout, response_timeout, read_timeout: seconds (defaults 10, 20, 60).
        first_byte_deadline: seconds a stream may take to its first byte, retries included (60).
        retries, retry_deadline: the retry budget (defaults from ``SHARDSTREAM_RETRIES`` and
            ``SHARDSTREAM_RETRY_DEADLINE``).
        max_body: the most bytes a whole read of an object of unknown size takes (``get_into``, a
            manifest, an index; bytes or a size such as ``"4G"``; default ``SHARDSTREAM_MAX_BODY``,
            1 GiB); past it, ResponseTooLargeError.
        chunk_size: resumable upload chunk in bytes, a multiple of 256 KiB (default 16 MiB);
            smaller objects are sent in one request at ``close()``.
        max_results: objects per listing page (default 1000, GCS's maximum).
    """

    #: A forked child may use its parent's instance: both pools forget the parent's connections
    #: at the fork, the credentials object holds plain data (token, expiry) behind a fork-safe
    #: lock, and the request counter is advisory.
    fork_safe = True
    can_list = True
    #: ``get_into`` makes one attempt: the object fetcher retries, lowering its requests in
    #: flight when it is throttled.
    retries_in_get_into = False

    #: An open waits for a round trip: ``open_ahead`` starts it on a thread.
    opens_ahead = True

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        token: object = None,
        project: str | None = None,
        verify: bool | str = True,
        connect_timeout: float = 10.0,
        response_timeout: float = 20.0,
        read_timeout: float = 60.0,
        first_byte_deadline: float = 60.0,
        retries: int | object = UNSET,
        retry_deadline: float | object = UNSET,
        max_body: int | str | object = UNSET,
        chunk_size: int = 16 << 20,
        max_results: int = 1000,
    ) -> None:
        if chunk_size < _CHUNK_UNIT or chunk_size % _CHUNK_UNIT:
            raise ConfigurationError(
                f"chunk_size={chunk_size} must be a positive multiple of 256 KiB ({_CHUNK_UNIT}), as GCS "
                "requires for resumable upload chunks"
            )
        if not 1 <= max_results <= 1000:
            raise ConfigurationError(f"max_results={max_results} must be between 1 and 1000")
        env = store_env()
        emulator = env.storage_emulator_host
        endpoint = endpoint_url or emulator or GOOGLE_ENDPOINT
        if "://" not in endpoint:  # STORAGE_EMULATOR_HOST=localhost:4443, as Google's clients accept
            endpoint = f"http://{endpoint}"
        self.endpoint_url = endpoint.rstrip("/")
        parts = urlsplit(self.endpoint_url)
        scheme = parts.scheme.lower()
        self._origin = _origin(self.endpoint_url)
        self._host = parts.netloc
        self._root = parts.path.rstrip("/")  # (an endpoint may have a path prefix)
        self._origin_url = f"{scheme}://{parts.netloc}"
        self.chunk_size = chunk_size
        self.max_results = max_results
        self.policy = RetryPolicy.from_options(
            retries=retries, retry_deadline=retry_deadline, first_byte_deadline=first_byte_deadline
        )
        net = network(
            verify,
            connect_timeout=connect_timeout,
            response_timeout=response_timeout,
            read_timeout=read_timeout,
            max_body=max_body,
        )
        self.max_body = net.max_body
        self.pool = net.pool()
        # Whole small objects (get_into, get_many) take a leaner client than streamed ones.
        self.whole = net.whole()
        on_emulator = emulator is not None and endpoint_url is None
        self.auth = GCSAuth(
            token=token, emulator=on_emulator, project=project or env.google_cloud_project, pool=self.pool
        )

    def __repr__(self) -> str:
        return f"GCSSource(endpoint_url={redact_url(self.endpoint_url)!r}, credentials={self.auth.kind!r})"

    # -- requests ---------------------------------------------------------------------------------

    def object_path(self, bucket: str, key: str = "", *, media: bool = False, upload: bool = False) -> str:
        """The request target of an object's JSON metadata (``media``: of its bytes), or of the
        bucket's upload endpoint (``upload``); bucket and key are percent-encoded whole."""
        b = quote(bucket, safe="")
        if upload:
            return f"{self._root}/upload/storage/v1/b/{b}/o"
        if media:
            return f"{self._root}/download/storage/v1/b/{b}/o/{quote(key, safe='')}?alt=media"
        return f"{self._root}/storage/v1/b/{b}/o" + (f"/{quote(key, safe='')}" if key else "")

    def object_url(self, bucket: str, key: str = "", *, media: bool = False, upload: bool = False) -> str:
        """:meth:`object_path` as an absolute URL on the endpoint."""
        return self._origin_url + self.object_path(bucket, key, media=media, upload=upload)

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the endpoint's origin (credentials go nowhere else)."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        return (
            scheme,
            parts.hostname or "",
            parts.port or (443 if scheme == "https" else 80),
        ) == self._origin

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> PooledBody:
        """``method url`` with the credentials (on the endpoint's origin only); a 401 refreshes
        the token once and sends the request again. Network errors propagate untranslated (the
        pool never sends an upload's PUT or POST twice on its own: the writer asks the session
        what arrived)."""
        for attempt in range(2):
            auth = self.auth.headers() if self.same_origin(url) else {}
            response = self.pool.request(method, url, headers={**(headers or {}), **auth}, body=body)
            if response.response.status != 401 or attempt or not self.auth.refresh_after_401(auth):
                return response
            response.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def error(self, status: int, url: str, detail: str, *, action: str = "open") -> SourceError:
        """The shardstream error for an error ``status`` of a request about ``url``."""
        return gcs_error(
            status, url, detail, action=action, credentials=self.auth.kind, endpoint=self.endpoint_url
        )

    def translate(self, exc: BaseException, url: str) -> SourceError:
        """The shardstream error for a network exception on ``url``."""
        return network_error(exc, url, endpoint=self.endpoint_url)

    # -- reading ----------------------------------------------------------------------------------

    def _opener(self, url: str, end: int | None, offset: int, generation: str | None) -> Opened:
        bucket, key = parse_gs_url(url)
        target = self.object_url(bucket, key, media=True)
        if generation:
            target += f"&ifGenerationMatch={generation}"
        headers = {"Accept-Encoding": "identity"}
        byte_range = range_header(offset, end)
        if byte_range is not None:
            headers["Range"] = byte_range
        body = self.request("GET", target, headers)
        resp = body.response
        if resp.status == 416 and byte_range is not None:
            return beyond_end(body)
        if resp.status >= 300:
            raise self.error(resp.status, url, error_detail(body))
        found = resp.getheader("X-Goog-Generation")
        if resp.status == 206:
            size = content_range_total(resp.getheader("Content-Range"))
        else:
            length = resp.getheader("Content-Length")
            size = int(length) if length and length.isdigit() else None
            if offset:
                body.close()
                raise SourceError(f"{redact_url(url)}: the server ignored the Range request", url=url)
        return Opened(body, size, found)

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``gs://bucket/key`` (to the end when
        ``length`` is ``None``); transient faults are retried and resumed within the range."""
        parse_gs_url(url)
        end = check_range(url, offset, length)
        self.auth.resolve()  # a missing google-auth or key file is an error now, not a retry
        reader = ResumableReader(
            url,
            functools.partial(self._opener, url, end),
            translate=functools.partial(self.translate, url=url),
            offset=offset,
            length=length,
            policy=self.policy,
        )
        return cast(BinaryIO, reader)

    def get_into(
        self,
        url: str,
        sink: bytearray,
        *,
        etag: str | None = None,
        offset: int = 0,
        length: int | None = None,
        size: int | None = None,
    ) -> str | None:
        """One GET of bytes ``[offset, offset + length)`` of ``url`` on the whole-body client,
        appended to ``sink`` after the bytes of the range already there (a resume); ``etag`` (a
        generation) pins the version. Returns the object's generation. No retries (the object
        fetcher retries, lowering its requests in flight when throttled); a 401 refreshes the
        token once. Bounded by the range's length or ``size`` (the object's, when the caller knows
        it), else by ``max_body``: past it, ResponseTooLargeError."""
        bucket, key = parse_gs_url(url)
        start = len(sink)
        at = offset + start
        end = None if length is None else offset + length
        if end is not None and start and at >= end:
            return etag  # (a resume of a range that is complete)
        target = self.object_path(bucket, key, media=True)
        if etag:
            target += f"&ifGenerationMatch={etag}"
        headers = {"Host": self._host, "Accept-Encoding": "identity"}
        byte_range = range_header(at, end) if (at or end is not None) else None
        if byte_range is not None:
            headers["Range"] = byte_range
        bound = expect(at, end, size)
        self.auth.resolve()
        for attempt in range(2):
            auth = self.auth.headers()
            try:
                resp = self.whole.get(self._origin, target, {**headers, **auth}, sink, expect=bound)
            except SourceError:
                raise
            except Exception as exc:
                raise self.translate(exc, url) from exc
            if resp.status != 401 or attempt or not self.auth.refresh_after_401(auth):
                break
            del sink[start:]
        status = resp.status
        if status >= 300:
            body = bytes(sink[start:])
            del sink[start:]
            if status == 416 and byte_range is not None:  # the range starts at or past the end
                return etag
            raise self.error(status, url, error_detail(None, body))
        generation = resp.headers.get("x-goog-generation")
        if etag and generation and generation != etag:  # (an emulator that ignores ifGenerationMatch)
            del sink[start:]
            raise ObjectChangedError(
                f"{redact_url(url)} changed while it was being read (generation {etag} -> "
                f"{generation}); do not overwrite objects while they are being read; read it again",
                url=url,
                status=412,
            )
        settle_range(status, resp.headers.get("content-range"), sink, start, at, end, url)
        return generation or etag

    def get_many(self, *, window: int) -> ManyGets:
        """Whole objects or byte ranges many at a time on this thread's ``epoll`` loop
        (:mod:`._epoll_gets`); where ``epoll`` is missing, the default (``get_into`` on threads)."""
        if MULTIPLEX_AVAILABLE:
            return EpollGets(self)
        return super().get_many(window=window)

    def get_request(self, url: str, offset: int = 0, length: int | None = None) -> tuple[Key, bytes]:
        """``(address, request bytes)`` of one GET of ``url`` (bytes ``[offset, offset + length)``
        with a ``Range`` header when asked), with the bearer token, for :mod:`._epoll_gets`."""
        bucket, key = parse_gs_url(url)
        try:
            auth = self.auth.headers()
        except SourceError:
            raise
        except Exception as exc:  # (google-auth's own errors: a refresh that failed)
            raise self.translate(exc, url) from exc
        lines = "".join(f"{name}: {value}\r\n" for name, value in auth.items())
        if offset or length is not None:  # (an empty range asks for one byte, cut by the caller)
            last = offset if length is None or length < 1 else offset + length - 1
            lines += f"Range: bytes={offset}-{'' if length is None else last}\r\n"
        target = self.object_path(bucket, key, media=True)
        request = f"GET {target} HTTP/1.1\r\nHost: {self._host}\r\n{lines}Accept-Encoding: identity\r\n\r\n"
        return self._origin, request.encode("latin-1")

    def answer_error(self, status: int, head: bytes, body: bytes, url: str) -> SourceError:
        """The error for an error ``status`` of a GET of ``url``; a 401 to a token that can be
        renewed is transient (``get_into``, which the retry goes through, refreshes it)."""
        if status == 401 and self.auth.renewable:
            return TransientSourceError(
                f"{redact_url(url)}: the access token was refused (401); it is refreshed and the GET retried",
                url=url,
                status=401,
            )
        return self.error(status, url, error_detail(None, body))

    def stat(self, url: str) -> ObjectInfo:
        """Size and generation from the object's JSON metadata."""
        bucket, key = parse_gs_url(url)
        meta = self.json("GET", self.object_url(bucket, key) + "?fields=size,generation", url, action="stat")
        size, generation = meta.get("size"), meta.get("generation")
        return ObjectInfo(
            size=int(str(size)) if size is not None else None,
            etag=str(generation) if generation is not None else None,
        )

    def json(self, method: str, target: str, url: str, *, action: str = "open") -> dict[str, object]:
        """A JSON API answer as a dict; errors name ``url``."""
        self.auth.resolve()
        try:
            body = self.request(method, target, {"Accept-Encoding": "identity"})
            status = body.response.status
            if status >= 300:
                raise self.error(status, url, error_detail(body), action=action)
            data = body.read_all(self.body_limit())
            body.finish()
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from exc
        found: dict[str, object] = json.loads(data or b"{}")
        return found

    # -- listing ----------------------------------------------------------------------------------

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Every object under ``gs://bucket/prefix/``, page by page (``max_results`` per page);
        a missing bucket is a ShardNotFoundError naming it."""
        bucket, key_prefix = parse_gs_url(prefix, key_required=False)
        base = (
            f"{self.object_url(bucket)}?prefix={quote(key_prefix, safe='')}&maxResults={self.max_results}"
            "&fields=items(name,size,generation),nextPageToken"
        )
        page_token = ""
        while True:
            target = base + (f"&pageToken={quote(page_token, safe='')}" if page_token else "")
            page = self.json("GET", target, f"gs://{bucket}/{key_prefix}", action="list")
            items = page.get("items") or []
            for item in cast(list[dict[str, str]], items):
                name = item["name"]
                if not name.endswith("/"):
                    yield Listed(
                        name[len(key_prefix) :], int(item.get("size", -1)), item.get("generation", "")
                    )
            page_token = str(page.get("nextPageToken") or "")
            if not page_token:
                return

    # -- writing ----------------------------------------------------------------------------------

    def create(self, url: str) -> BinaryIO:
        """Open ``gs://bucket/key`` for writing (a resumable upload; visible on ``close()`` only)."""
        bucket, key = parse_gs_url(url)
        self.auth.resolve()
        return cast(BinaryIO, GCSWriter(self, url, bucket, key))

    def close(self) -> None:
        self.pool.close()
        self.whole.close()
