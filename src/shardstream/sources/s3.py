"""``s3://bucket/key`` URLs: requests we sign ourselves on our own HTTP/1.1 clients.

Configuration, credentials and addressing follow botocore exactly (:mod:`._s3_signing`): the
address of a bucket's objects is learned from one presigned URL per bucket, and every request is
then signed with our SigV4 (:mod:`._sigv4`). The bytes travel on two clients of
:mod:`shardstream.net`: streamed shards on ``http.client`` connections (:mod:`~shardstream.net.pool`,
which fills the caller's buffer straight from the socket: the least client CPU per GB of the
clients compared by ``tests/integration/_measure_s3_clients.py``), and whole small objects on a leaner pool
(:mod:`~shardstream.net.whole`), also driven many at a time from one thread for
:meth:`S3Source.get_many` (:mod:`._epoll_gets`). Retries, resume and ``close()`` that drops a
connection at once are therefore ours. Writes use the botocore client (multipart upload,
:mod:`._s3_writer`), where per-request overhead does not matter.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, cast

from ..config import UNSET
from ..errors import ConfigurationError, SourceError, redact_url
from ..forks import ForkSafeLock, GatedExecutor
from ..net.multiplex import AVAILABLE as MULTIPLEX_AVAILABLE
from ._epoll_gets import EpollGets, expect, settle_range
from ._resume import Opened, ResumableReader, range_header
from ._retry import RetryPolicy
from ._s3_errors import _CODES as _CODES
from ._s3_errors import cause, code_in, error_code, s3_error
from ._s3_signing import S3Addressing, _is_aws, parse_s3_url
from ._s3_writer import S3Writer
from ._sigv4 import SigV4Signer
from .base import Listed, ObjectInfo, SourceBase, check_range
from .http import beyond_end, content_range_total, network
from .many import ManyGets

__all__ = ["S3Source", "S3Writer", "parse_s3_url", "s3_error"]

_MIN_PART = 5 << 20
_PARALLEL_LISTS = 8


class S3Source(S3Addressing, SourceBase):
    """Reads and writes ``s3://`` URLs for one set of credentials and one endpoint.

    Unset options follow the AWS SDK's own rules (``AWS_*`` environment variables, the config and
    credentials files, ``AWS_PROFILE``, instance roles), so what works for the ``aws`` CLI works
    here. Two datasets with different ``storage_options`` get two independent sources.

    Args:
        endpoint_url: S3-compatible server, e.g. ``http://127.0.0.1:8333`` (default:
            ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` / AWS).
        access_key_id, secret_access_key, session_token: explicit credentials (aliases ``key``,
            ``secret``, ``token`` as in s3fs). Never logged or shown in reprs and messages.
        profile: a named profile from the AWS config files.
        region: signing region (default: ``AWS_REGION`` / profile / ``us-east-1``).
        anon: send unsigned requests, for public buckets (default False).
        addressing_style: ``"path"``, ``"virtual"`` or ``"auto"``; default ``"path"`` for a custom
            endpoint (what S3-compatible servers expect) and ``"auto"`` for AWS.
        connect_timeout, read_timeout: seconds (defaults 10 and 60); a stalled read is retried.
        response_timeout: seconds to wait for a response's status line and headers (default 20).
        first_byte_deadline: seconds a stream may spend, retries included, before its first byte
            arrives (default 60): a server that accepts connections but never answers fails after
            about this long; once bytes flow, ``retries``/``retry_deadline`` govern.
        verify: ``True`` (``AWS_CA_BUNDLE``, else ``REQUESTS_CA_BUNDLE``, else the system's CAs),
            a CA bundle path, or ``False`` (TLS checks off). ``HTTPS_PROXY``/``HTTP_PROXY``/
            ``NO_PROXY`` are honoured by every request, botocore's and ours.
        retries, retry_deadline: the retry budget (defaults from ``SHARDSTREAM_RETRIES`` and
            ``SHARDSTREAM_RETRY_DEADLINE``).
        max_body: the most bytes a whole read of an object of unknown size takes (``get_into``, a
            manifest, an index; bytes or a size such as ``"4G"``; default ``SHARDSTREAM_MAX_BODY``,
            1 GiB); past it, ResponseTooLargeError.
        part_size: multipart upload part size in bytes for writes (default 16 MiB, minimum 5 MiB).
    """

    #: ``get_into`` makes one attempt: the object fetcher retries, lowering its requests in
    #: flight when it is throttled.
    retries_in_get_into = False

    #: A forked child may use its parent's instance (see ``get_source``): the connection pools
    #: forget the parent's connections at the fork, and the botocore client is rebuilt in the
    #: child on first use (``client``); locks are fork-safe.
    fork_safe = True
    can_list = True

    #: An open waits for a round trip: ``open_ahead`` starts it on a thread.
    opens_ahead = True

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        profile: str | None = None,
        region: str | None = None,
        anon: bool = False,
        addressing_style: str | None = None,
        connect_timeout: float = 10.0,
        response_timeout: float = 20.0,
        read_timeout: float = 60.0,
        first_byte_deadline: float = 60.0,
        verify: bool | str = True,
        retries: int | object = UNSET,
        retry_deadline: float | object = UNSET,
        max_body: int | str | object = UNSET,
        part_size: int = 16 << 20,
        key: str | None = None,
        secret: str | None = None,
        token: str | None = None,
    ) -> None:
        if part_size < _MIN_PART:
            raise ConfigurationError(
                f"part_size={part_size} is below S3's minimum part size of 5 MiB ({_MIN_PART})"
            )
        if addressing_style not in (None, "path", "virtual", "auto"):
            raise ConfigurationError(
                f"addressing_style={addressing_style!r}; use 'path', 'virtual' or 'auto'"
            )
        self.part_size = part_size
        self.anon = anon
        self.profile = profile
        self.policy = RetryPolicy.from_options(
            retries=retries, retry_deadline=retry_deadline, first_byte_deadline=first_byte_deadline
        )
        self.requests: Counter[str] = Counter()  # GETs per URL (resumes included), for tests/stats
        self._count_lock = ForkSafeLock()
        # AWS_CA_BUNDLE, proxies from the env
        net = network(
            verify,
            aws=True,
            connect_timeout=connect_timeout,
            response_timeout=response_timeout,
            read_timeout=read_timeout,
            max_body=max_body,
        )
        self.max_body = net.max_body
        self._client_args = dict(
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key_id or key,
            aws_secret_access_key=secret_access_key or secret,
            aws_session_token=session_token or token,
            verify=net.verify,
        )
        self._timeouts = (connect_timeout, read_timeout)
        self._client_lock = ForkSafeLock()
        self._addressing = addressing_style or ("path" if endpoint_url else "auto")
        self._client = self._make_client(self._addressing)
        self.endpoint_url: str = self._client.meta.endpoint_url
        if addressing_style is None and endpoint_url is None and not _is_aws(self.endpoint_url):
            # AWS_ENDPOINT_URL or a profile's endpoint_url names an S3-compatible server.
            self._addressing = "path"
            self._client = self._make_client(self._addressing)
        self._client_pid = os.getpid()
        self.region: str | None = self._client.meta.region_name
        self._signer = SigV4Signer(self._frozen_credentials, self.region or "us-east-1")
        self._bases = {}  # bucket -> (address, Host, prefix)
        self.pool = net.pool()
        # Whole small objects (get_into, get_many) take a leaner client than streamed shards.
        self.whole = net.whole()

    def __repr__(self) -> str:
        return (
            f"S3Source(endpoint_url={redact_url(self.endpoint_url)!r}, region={self.region!r}, "
            f"profile={self.profile!r}, anon={self.anon})"
        )

    # -- reading ----------------------------------------------------------------------------------

    def _get_headers(self, url: str, offset: int, end: int | None, etag: str | None) -> dict[str, str]:
        """The unsigned headers of a GET of bytes ``[offset, end)`` (counted in ``requests``)."""
        headers = {"Accept-Encoding": "identity"}
        byte_range = range_header(offset, end)
        if byte_range is not None:
            headers["Range"] = byte_range
        if etag:
            headers["If-Match"] = etag
        self._count(url)
        return headers

    def _opener(self, url: str, end: int | None, offset: int, etag: str | None) -> Opened:
        headers = self._get_headers(url, offset, end, etag)
        byte_range = headers.get("Range")
        target, signature = self.signed_request("GET", url)
        body = self.pool.request("GET", target, headers={**headers, **signature})
        resp = body.response
        if resp.status == 416 and byte_range is not None:
            return beyond_end(body)  # InvalidRange: the range starts at or past the object's end
        if resp.status >= 300:
            raise s3_error(resp.status, error_code(body), url, endpoint=self.endpoint_url)
        if resp.status == 206:
            size = content_range_total(resp.getheader("Content-Range"))
        else:
            length = resp.getheader("Content-Length")
            size = int(length) if length and length.isdigit() else None
            if offset:
                body.close()
                raise SourceError(f"{redact_url(url)}: the server ignored the Range request", url=url)
        return Opened(body, size, resp.getheader("ETag"))

    def open_once(self, url: str, *, offset: int = 0, etag: str | None = None) -> Opened:
        """One signed GET of ``url`` from byte ``offset``, without retries (the object fetcher
        retries itself, so that throttling lowers its concurrency). Failures are shardstream
        errors: 503 SlowDown is a TransientSourceError with ``status == 503``; with ``etag``, a
        changed object is an ObjectChangedError."""
        try:
            return self._opener(url, None, offset, etag)
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from exc

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
        """One signed GET of ``url`` (the whole object, or bytes ``[offset, offset + length)``)
        appended to ``sink``, resuming after the bytes of it already there (a ``Range`` request,
        with ``If-Match: etag`` when given); returns the object's ETag. No retries (the object
        fetcher retries, so that throttling lowers its concurrency); failures are shardstream
        errors, and body bytes that arrived before a failure stay in ``sink``. About a third of
        ``open_once``'s client CPU (see :mod:`shardstream.net.whole`). The answers to a range
        are read as :mod:`._epoll_gets` reads them (a 200 is cut to the range, a 416 is no bytes).
        The body is bounded by the range's length or ``size`` (the object's, when the caller
        knows it), else by ``max_body``: past it, ResponseTooLargeError."""
        start = len(sink)
        at = offset + start
        end = None if length is None else offset + length
        if end is not None and start and at >= end:
            return etag  # (a resume of a range that is complete)
        ranged = bool(at) or end is not None
        bound = expect(at, end, size)
        try:
            if ranged or etag:  # a range, a resume, or a version to check: Range / If-Match
                headers = self._get_headers(url, at, end, etag)
                address, _, path, signature = self._signed_parts("GET", url)
                signature.update(headers)
                resp = self.whole.get(address, path, signature, sink, expect=bound)
            else:  # the whole object: the request the fetch loop sends, rendered in one go
                address, request = self.get_request(url)
                resp = self.whole.send(address, request, sink, expect=bound)
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from exc
        status = resp.status
        if status >= 300:
            body = bytes(sink[start:])
            del sink[start:]
            if status == 416 and ranged:  # the range starts at or past the end: no bytes there
                return resp.headers.get("etag") or etag
            raise s3_error(status, code_in(body), url, endpoint=self.endpoint_url)
        settle_range(status, resp.headers.get("content-range"), sink, start, at, end, url)
        return resp.headers.get("etag") or etag

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``s3://bucket/key`` (to the end when
        ``length`` is ``None``); transient faults are retried and resumed within the range."""
        parse_s3_url(url)
        end = check_range(url, offset, length)
        reader = ResumableReader(
            url,
            functools.partial(self._opener, url, end),
            translate=functools.partial(self.translate, url=url),
            offset=offset,
            length=length,
            policy=self.policy,
        )
        return cast(BinaryIO, reader)

    def get_many(self, *, window: int) -> ManyGets:
        """Whole objects or byte ranges many at a time on this thread's ``epoll`` loop (:mod:`._epoll_gets`);
        where ``epoll`` is missing, the default (``get_into`` on threads)."""
        if MULTIPLEX_AVAILABLE:
            return EpollGets(self)
        return super().get_many(window=window)

    def answer_error(self, status: int, head: bytes, body: bytes, url: str) -> SourceError:
        """The error for an error ``status`` of a GET of ``url`` (S3's code read from ``body``)."""
        return s3_error(status, code_in(body), url, endpoint=self.endpoint_url)

    def stat(self, url: str) -> ObjectInfo:
        """Size and ETag from a ``HEAD`` request."""
        target, signature = self.signed_request("HEAD", url)
        try:
            body = self.pool.request("HEAD", target, headers={"Accept-Encoding": "identity", **signature})
        except Exception as exc:
            raise self.translate(exc, url, "stat") from exc
        resp = body.response
        body.finish()
        if resp.status >= 300:
            raise s3_error(resp.status, None, url, action="stat", endpoint=self.endpoint_url)
        length = resp.getheader("Content-Length")
        return ObjectInfo(
            size=int(length) if length and length.isdigit() else None, etag=resp.getheader("ETag")
        )

    # -- listing ----------------------------------------------------------------------------------

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Every object under ``s3://bucket/prefix/``, listed in parallel by sub-prefix.

        S3 returns at most 1,000 keys per LIST page and pages are sequential, so a flat listing of
        10 million keys is 10,000 round trips one after another. The first request asks with
        ``Delimiter="/"``: it returns the objects directly under the prefix and the sub-prefixes
        ("directories"); the sub-prefixes are then listed fully, up to 8 at a time. A prefix
        without sub-prefixes is listed in sequence (its first page is already the delimiter page).
        """
        bucket, _, key_prefix = prefix[len("s3://") :].partition("/")
        client = self.client

        def pages(sub: str, delimiter: bool) -> Iterator[dict[str, Any]]:
            token: str | None = None
            while True:
                args: dict[str, Any] = {"Bucket": bucket, "Prefix": sub}
                if delimiter:
                    args["Delimiter"] = "/"
                if token:
                    args["ContinuationToken"] = token
                try:
                    page: dict[str, Any] = client.list_objects_v2(**args)
                except Exception as exc:
                    raise self.translate(exc, f"s3://{bucket}/{sub}", "list") from cause(exc)
                yield page
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token:
                    return

        def rows(page: Mapping[str, Any]) -> list[Listed]:
            return [
                Listed(obj["Key"][len(key_prefix) :], int(obj.get("Size", -1)), str(obj.get("ETag", "")))
                for obj in page.get("Contents", ())
                if not obj["Key"].endswith("/")
            ]

        def list_all(sub: str) -> list[Listed]:
            return [row for page in pages(sub, False) for row in rows(page)]

        subs: list[str] = []
        for page in pages(key_prefix, True):
            yield from rows(page)
            subs.extend(p["Prefix"] for p in page.get("CommonPrefixes", ()))
        if len(subs) == 1:
            yield from list_all(subs[0])
        elif subs:
            with GatedExecutor(
                min(_PARALLEL_LISTS, len(subs)), thread_name_prefix="shardstream-list"
            ) as pool:
                for part in pool.map(list_all, subs):
                    yield from part

    # -- writing ----------------------------------------------------------------------------------

    def create(self, url: str) -> BinaryIO:
        """Open ``s3://bucket/key`` for writing (streamed multipart upload; visible on close)."""
        bucket, key = parse_s3_url(url)
        return cast(BinaryIO, S3Writer(self, url, bucket, key))

    def close(self) -> None:
        self.pool.close()
        self.whole.close()
        self._client.close()
