"""``s3://bucket/key`` URLs: botocore for configuration and signing, ``http.client`` for the bytes.

Why this client (measured against a local SeaweedFS on 127.0.0.1, 2 shared cores; 3 objects of
50 MB read 5 times, then 50 objects of 64 KB; ``tests/integration/_measure_s3_clients.py``)::

    client                        MB/s   client CPU-s/GB   GET/s (64 KB)   CPU-ms/GET
    boto3 get_object().read()     1086        0.33              376           1.65
    obstore get().stream()         971        0.61              842           0.24
    urllib3 + SigV4 headers       1084        0.39              707           0.66
    botocore presign + http.client 1063       0.29              654           0.74

A second run on a machine loaded by other jobs (load average 7) kept the order of CPU per GB:
boto3 0.26, obstore 0.52, urllib3 0.46, presign + http.client 0.22, and this module's S3Source end
to end (resumable reader included) 0.22 CPU-s/GB at 1.1 CPU-ms per GET.

Wall-clock throughput is bounded by the server (all within ~10%, about the speed of ``curl``),
so the choice is made on client CPU per GB, which is what a DataLoader worker competes for with
decoding: ``http.client.readinto`` fills the caller's buffer straight from the socket, while
boto3/urllib3 return new ``bytes`` per read and obstore hands over Rust buffers that still need a
copy. obstore's per-request cost is the lowest, but shards are tens of MB or more, where its
per-GB cost dominates (break-even near 1.5 MB per object). botocore still does everything that
must match the AWS tools exactly: credential chain (env vars, config/credentials files, profiles,
SSO, instance roles), ``AWS_ENDPOINT_URL``, regions and SigV4, through public API
(``generate_presigned_url``); the presigned URL is fetched with our pooled connections, so ranges
for resume and ``close()`` that drops the connection at once are ours to control. Writes use the
botocore client directly (multipart upload), where per-request overhead does not matter.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from typing import Any, BinaryIO, cast
from urllib.parse import urlsplit

from ..config import UNSET
from ..errors import ConfigurationError, SourceError, redact_url
from ..forks import ForkSafeLock
from ..net.idle import Key as Address
from ..net.pool import ConnectionPool
from ..net.whole import WholeBodyPool
from ._resume import Opened, ResumableReader, range_header
from ._retry import RetryPolicy
from ._s3_errors import _CODES as _CODES
from ._s3_errors import code_in, error_code, s3_error
from ._s3_errors import translate as _translate
from ._s3_writer import S3Writer
from ._sigv4 import Credentials, SigV4Signer, uri_encode
from .base import ObjectInfo, check_range
from .http import beyond_end, content_range_total, ssl_context

__all__ = ["S3Source", "S3Writer", "parse_s3_url", "s3_error"]

_MIN_PART = 5 << 20


def parse_s3_url(url: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key``; raises ConfigurationError for anything else."""
    if url.startswith("s3://") and "?" not in url and "#" not in url:  # urlsplit costs ~10 us
        bucket, _, key = url[5:].partition("/")
        key = key.lstrip("/")
        if bucket and key:
            return bucket, key
    parts = urlsplit(url)
    key = parts.path.lstrip("/")
    if parts.scheme.lower() != "s3" or not parts.netloc or not key:
        raise ConfigurationError(
            f"{redact_url(url)!r} is not an S3 object URL; expected s3://bucket/path/to/shard.tar"
        )
    return parts.netloc, key


def _load_botocore() -> Any:
    try:
        import botocore.session
    except ImportError as exc:
        raise ImportError("reading s3:// URLs needs botocore: pip install 'shardstream[s3]'") from exc
    return botocore


class S3Source:
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
        verify: ``True``, a CA bundle path, or ``False`` (TLS checks off).
        retries, retry_deadline: the retry budget (defaults from ``SHARDSTREAM_RETRIES`` and
            ``SHARDSTREAM_RETRY_DEADLINE``).
        part_size: multipart upload part size in bytes for writes (default 16 MiB, minimum 5 MiB).
    """

    #: A forked child may use its parent's instance (see ``get_source``): the connection pools
    #: forget the parent's connections at the fork, and the botocore client is rebuilt in the
    #: child on first use (``client``); locks are fork-safe.
    fork_safe = True

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
        self._client_args = dict(
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key_id or key,
            aws_secret_access_key=secret_access_key or secret,
            aws_session_token=session_token or token,
            verify=verify,
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
        self._bases: dict[str, tuple[Address, str, str]] = {}  # bucket -> (address, Host, prefix)
        self.pool = ConnectionPool(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            response_timeout=response_timeout,
            ssl_context=ssl_context(verify),
        )
        # Whole small objects (get_into) take a leaner client than streamed shards (see _lean).
        self.lean = WholeBodyPool(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            response_timeout=response_timeout,
            ssl_context=ssl_context(verify),
        )

    @property
    def client(self) -> Any:
        """The botocore client (signing, writes). A forked child builds its own: botocore's
        connection pool and credential-refresh locks must not be shared with the parent."""
        if self._client_pid != os.getpid():
            with self._client_lock:
                if self._client_pid != os.getpid():
                    self._client = self._make_client(self._addressing)
                    self._client_pid = os.getpid()
        return self._client

    def _refresh_credentials(self, failed: Any) -> None:
        """After "no credentials": build a new client, which looks them up again (the user may
        have set ``AWS_*`` variables or logged in since). A failed lookup is never kept."""
        with self._client_lock:
            if self._client is failed:  # not already replaced by another thread
                self._client = self._make_client(self._addressing)

    def _make_client(self, addressing_style: str) -> Any:
        botocore = _load_botocore()
        from botocore.config import Config

        try:
            session = botocore.session.Session(profile=self.profile)
            config = Config(
                signature_version=botocore.UNSIGNED if self.anon else "s3v4",
                s3={"addressing_style": addressing_style},
                connect_timeout=self._timeouts[0],
                read_timeout=self._timeouts[1],
                retries={"max_attempts": self.policy.attempts, "mode": "standard"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            client = session.create_client("s3", config=config, **self._client_args)
            self._session = session
            return client
        except botocore.exceptions.ProfileNotFound as exc:
            raise ConfigurationError(
                f"AWS profile {self.profile!r} not found in the AWS config files; check the name "
                "(aws configure list-profiles) or pass credentials in storage_options"
            ) from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise ConfigurationError(f"cannot configure the S3 client: {redact_url(exc)}") from exc

    def __repr__(self) -> str:
        return (
            f"S3Source(endpoint_url={redact_url(self.endpoint_url)!r}, region={self.region!r}, "
            f"profile={self.profile!r}, anon={self.anon})"
        )

    # -- errors -----------------------------------------------------------------------------------

    def translate(self, exc: BaseException, url: str, action: str = "open") -> SourceError:
        """Map a botocore, socket or ``http.client`` exception to a shardstream error."""
        return _translate(exc, url, action, endpoint=self.endpoint_url)

    # -- reading ----------------------------------------------------------------------------------

    def _frozen_credentials(self) -> Credentials:
        """The current credentials (botocore refreshes temporary ones inside this call)."""
        args = self._client_args
        if args["aws_access_key_id"] and args["aws_secret_access_key"]:
            # Static keys need no botocore client: a DataLoader worker that only reads signs
            # without building one (about 0.3 s of CPU per worker and epoch).
            return Credentials(
                str(args["aws_access_key_id"]),
                str(args["aws_secret_access_key"]),
                cast("str | None", args["aws_session_token"]),
            )
        self.client  # noqa: B018 - a forked child rebuilds its client, and with it the session
        found = self._session.get_credentials()  # a session that found none looks again
        if found is None:
            from botocore.exceptions import NoCredentialsError

            raise NoCredentialsError()
        frozen = found.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    def _base(self, bucket: str, url: str) -> tuple[Address, str, str]:
        """Address (scheme, hostname, port), ``Host`` and path prefix of ``bucket``'s objects, as
        botocore addresses them (path or virtual style, region endpoints): learned from one
        presigned URL per bucket."""
        base = self._bases.get(bucket)
        if base is None:
            signed = self._presign("get_object", f"s3://{bucket}/k", shown=url)
            parts = urlsplit(signed)
            scheme = parts.scheme.lower()
            port = parts.port or (443 if scheme == "https" else 80)
            base = ((scheme, parts.hostname or "", port), parts.netloc, parts.path[: -len("k")])
            self._bases[bucket] = base
        return base

    def signed_request(self, method: str, url: str) -> tuple[str, dict[str, str]]:
        """The HTTP URL of ``s3://bucket/key`` and the headers that sign a ``method`` request
        for it (none with ``anon=True``). Costs about 15 us of CPU (see :mod:`._sigv4`)."""
        address, host, path, headers = self._signed_parts(method, url)
        return f"{address[0]}://{host}{path}", headers

    def _signed_parts(self, method: str, url: str) -> tuple[Address, str, str, dict[str, str]]:
        """``(address, host, path, headers)`` of a signed ``method`` request for ``url``:
        ``address`` is ``(scheme, hostname, port)``, ``host`` the ``Host`` header."""
        bucket, key = parse_s3_url(url)
        try:
            address, host, prefix = self._base(bucket, url)
            path = prefix + uri_encode(key)
            if self.anon:
                return address, host, path, {"Host": host}
            return address, host, path, self._signer.sign(method, host, path)
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from exc

    def _presign(self, method: str, url: str, *, shown: str | None = None) -> str:
        bucket, key = parse_s3_url(url)
        params = {"Bucket": bucket, "Key": key}
        client = self.client
        try:
            try:
                signed: str = client.generate_presigned_url(method, Params=params, ExpiresIn=3600)
            except Exception as exc:
                if not _is_no_credentials(exc):
                    raise
                self._refresh_credentials(client)
                signed = self.client.generate_presigned_url(method, Params=params, ExpiresIn=3600)
        except Exception as exc:
            raise self.translate(exc, shown or url) from exc
        return signed

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

    def _count(self, url: str) -> None:
        """One more GET of ``url`` in ``requests``."""
        with self._count_lock:
            self.requests[url] += 1

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

    def get_into(self, url: str, sink: bytearray, *, etag: str | None = None) -> str | None:
        """One signed GET of the whole object ``url`` appended to ``sink``, resuming after the
        bytes already there (a ``Range`` request, with ``If-Match: etag`` when given); returns
        the object's ETag. No retries (the object fetcher retries, so that throttling lowers its
        concurrency); failures are shardstream errors, and body bytes that arrived before a
        failure stay in ``sink``. About a third of ``open_once``'s client CPU (see ``_lean``)."""
        start = len(sink)
        try:
            if start or etag:  # a resume, or a version to check: Range / If-Match
                headers = self._get_headers(url, start, None, etag)
                address, _, path, signature = self._signed_parts("GET", url)
                signature.update(headers)
                resp = self.lean.get(address, path, signature, sink)
            else:  # the whole object: the request the fetch loop sends, rendered in one go
                address, request = self.get_request(url)
                resp = self.lean.send(address, request, sink)
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from exc
        status = resp.status
        if status >= 300:
            body = bytes(sink[start:])
            del sink[start:]
            if status == 416 and start:  # the range starts at the end: nothing was missing
                return resp.headers.get("etag") or etag
            raise s3_error(status, code_in(body), url, endpoint=self.endpoint_url)
        if status == 200 and start:  # the server ignored the Range: the body is the whole object
            del sink[:start]
        return resp.headers.get("etag") or etag

    def get_request(self, url: str) -> tuple[Address, bytes]:
        """``(address, request bytes)`` of one signed GET of the whole object ``url``, for a
        caller that sends it itself (the objects' fetch loop, :mod:`._lean_multi`, on the lean
        client's connections); counted in ``requests``. An answer that is not a 2xx goes back to
        :meth:`get_into`, which turns it into the right error."""
        self._count(url)
        bucket, key = parse_s3_url(url)
        try:
            address, host, prefix = self._base(bucket, url)
            path = prefix + uri_encode(key)
            lines = f"Host: {host}\r\n" if self.anon else self._signer.header_lines("GET", host, path)
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from exc
        # one f-string: the request is the same shape for every object
        return address, f"GET {path} HTTP/1.1\r\n{lines}Accept-Encoding: identity\r\n\r\n".encode("latin-1")

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

    # -- writing ----------------------------------------------------------------------------------

    def create(self, url: str) -> BinaryIO:
        """Open ``s3://bucket/key`` for writing (streamed multipart upload; visible on close)."""
        bucket, key = parse_s3_url(url)
        return cast(BinaryIO, S3Writer(self, url, bucket, key))

    def close(self) -> None:
        self.pool.close()
        self.lean.close()
        self._client.close()


def _is_no_credentials(exc: BaseException) -> bool:
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    return isinstance(exc, NoCredentialsError | PartialCredentialsError)


def _is_aws(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    return host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn")
