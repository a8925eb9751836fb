"""``az://container/blob`` (and ``abfs[s]://container@account.dfs.core.windows.net/blob``): Azure
Blob Storage on our own HTTP/1.1 client, with requests we authorize ourselves.

Why not azure-storage-blob: its pipeline costs a policy chain, a request object and a response
object per request (measurable for many small objects), its download stream retries whole
requests but cannot resume a body cut half-way at the byte offset, and its ``close()`` drains
instead of dropping the connection. Shared Key signing is short (:mod:`._azure_auth`), so the
bytes travel on :mod:`shardstream.net.pool` like ``s3://`` and ``https://``: ranged reads with
``x-ms-range``, a cut connection resumed at the exact byte offset pinned by ``If-Match: <ETag>``
(:class:`~._resume.ResumableReader`), and ``close()`` that drops the connection at once. The
``azure`` extra brings only azure-identity, for Entra ID tokens.

Credentials, first match wins: the options ``anon=True``, ``credential=`` (a TokenCredential),
``sas_token=``, ``account_key=``, ``connection_string=``; then, only when none of those is given,
``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_ACCOUNT_NAME`` + ``AZURE_STORAGE_ACCOUNT_KEY``,
``AZURE_STORAGE_SAS_TOKEN``; else ``DefaultAzureCredential`` (scope
``https://storage.azure.com/.default``). The account comes from ``account_name=``, the connection
string, the URL's host (``abfs`` form) or ``AZURE_STORAGE_ACCOUNT_NAME``; the endpoint from
``endpoint_url=``, the connection string's ``BlobEndpoint``, else
``https://{account}.blob.core.windows.net``. Azurite is addressed path-style
(``http://127.0.0.1:10000/devstoreaccount1``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar, cast
from urllib.parse import quote, urlsplit

from ..config import UNSET, store_env
from ..errors import (
    AccessDeniedError,
    ConfigurationError,
    SourceError,
    redact_url,
)
from ..net.idle import Key
from ..net.multiplex import AVAILABLE as MULTIPLEX_AVAILABLE
from ..net.pool import PooledBody
from ..net.whole import render_request
from ._azure_auth import (
    DEV_ACCOUNT,
    DEV_KEY,
    ConnectionString,
    SharedKey,
    choose_credential,
    container_sas,
    parse_connection_string,
)
from ._azure_errors import azure_error, code_in, list_page, parse_azure_url
from ._azure_writer import AzureWriter
from ._epoll_gets import EpollGets, expect, header_value, settle_range
from ._resume import Opened, ResumableReader, range_header
from ._retry import RetryPolicy
from ._status import network_error
from .base import Listed, ObjectInfo, SourceBase, check_range
from .http import beyond_end, content_range_total, network
from .many import ManyGets

__all__ = [
    "DEV_ACCOUNT",
    "DEV_KEY",
    "AzureSource",
    "AzureWriter",
    "SharedKey",
    "azure_error",
    "container_sas",
    "parse_azure_url",
    "parse_connection_string",
]

log = logging.getLogger("shardstream.sources")

#: The Blob service version we speak (Range, If-Match, block blobs, List Blobs with markers).
API_VERSION = "2021-12-02"
_T = TypeVar("_T")


@dataclass(frozen=True)
class _Reply:
    """A whole (small) response: status, lower-cased headers and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class AzureSource(SourceBase):
    """Reads, lists and writes Azure Blob Storage (``az://``, ``abfs://``, ``abfss://``).

    Args:
        account_name: the storage account (default: from the connection string, the URL's host
            in the ``abfs`` form, or ``AZURE_STORAGE_ACCOUNT_NAME``).
        account_key: the account key (Shared Key signing). Never logged or shown.
        sas_token: a SAS token, appended to every request's query. Never logged (``sig`` is
            redacted from URLs).
        connection_string: an Azure Storage connection string (``AccountName=...;AccountKey=...``,
            ``BlobEndpoint=...``, ``SharedAccessSignature=...``, ``UseDevelopmentStorage=true``).
        anon: anonymous requests, for public containers (default False).
        credential: an azure-identity ``TokenCredential`` (Entra ID, ``Authorization: Bearer``).
        endpoint_url: the Blob endpoint, e.g. ``http://127.0.0.1:10000/devstoreaccount1`` for
            Azurite (default: the connection string's, else ``https://{account}.blob.core.windows.net``).
        connect_timeout, response_timeout, read_timeout: seconds (defaults 10, 20 and 60).
        first_byte_deadline: seconds a stream may spend, retries included, before its first byte
            (default 60).
        verify: ``True`` (``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``, else the system's CAs), a CA
            bundle path, or ``False``. ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` are honoured.
        retries, retry_deadline: the retry budget (defaults ``SHARDSTREAM_RETRIES`` and
            ``SHARDSTREAM_RETRY_DEADLINE``).
        max_body: the most bytes a whole read of an object of unknown size takes (``get_into``, a
            manifest, an index; bytes or a size such as ``"4G"``; default ``SHARDSTREAM_MAX_BODY``,
            1 GiB); past it, ResponseTooLargeError.
        block_size: bytes per uploaded block when writing (default 8 MiB; a blob holds at most
            50,000 blocks, so up to about 390 GiB at the default).
        maxresults: blobs per List Blobs page (default 5000, the service's maximum).
    """

    #: A forked child may use its parent's instance: the pool forgets the parent's connections at
    #: the fork, Shared Key and SAS hold only strings, a DefaultAzureCredential we built is built
    #: again in the child, and the token lock is fork-safe. (A ``credential=`` object of the
    #: caller's is used as it is in the child; the token it gave the parent is kept until renewal.)
    fork_safe = True
    can_list = True

    #: An open waits for a round trip: ``open_ahead`` starts it on a thread.
    opens_ahead = True

    def __init__(
        self,
        *,
        account_name: str | None = None,
        account_key: str | None = None,
        sas_token: str | None = None,
        connection_string: str | None = None,
        anon: bool = False,
        credential: Any = None,
        endpoint_url: str | None = None,
        connect_timeout: float = 10.0,
        response_timeout: float = 20.0,
        read_timeout: float = 60.0,
        first_byte_deadline: float = 60.0,
        verify: bool | str = True,
        retries: int | object = UNSET,
        retry_deadline: float | object = UNSET,
        max_body: int | str | object = UNSET,
        block_size: int = 8 << 20,
        maxresults: int = 5000,
    ) -> None:
        if block_size < 1 or maxresults < 1:
            raise ConfigurationError(f"{block_size=} and {maxresults=} must be positive")
        self.block_size = block_size
        self.maxresults = maxresults
        env = store_env()
        explicit = bool(anon or credential is not None or sas_token or account_key or connection_string)
        conn: ConnectionString | None = None
        if connection_string:
            conn = parse_connection_string(connection_string)
        elif not explicit and env.azure_connection_string:
            conn = parse_connection_string(env.azure_connection_string)
        self.account: str | None = (
            account_name or (conn.account_name if conn else None) or env.azure_account_name
        )
        endpoint = endpoint_url or (conn.blob_endpoint if conn else None)
        self.endpoint_url = endpoint.rstrip("/") if endpoint else None
        self.credential = choose_credential(
            self.account, anon, credential, sas_token, account_key, conn, explicit, env
        )
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
        # Whole small objects and byte ranges (get_into, get_many) take a leaner client.
        self.whole = net.whole()

    def __repr__(self) -> str:  # never the key, the SAS or the token
        endpoint = redact_url(self.endpoint_url) if self.endpoint_url is not None else None
        return (
            f"AzureSource(account={self.account!r}, endpoint_url={endpoint!r}, "
            f"credential={self.credential.kind!r})"
        )

    # -- requests ---------------------------------------------------------------------------------

    def _account(self, url: str, named: str | None) -> str:
        if named and self.account and named != self.account:
            raise ConfigurationError(
                f"{redact_url(url)} names account {named!r} but this source is for account "
                f"{self.account!r}; give each account its own storage_options"
            )
        account = named or self.account
        if account and isinstance(self.credential, SharedKey) and not self.credential.account:
            self.credential.account = self.account = account  # the key's account, from the first URL
        if not account:
            raise ConfigurationError(
                f"no Azure storage account for {redact_url(url)}: pass account_name= or "
                "connection_string= in storage_options, set AZURE_STORAGE_ACCOUNT_NAME or "
                "AZURE_STORAGE_CONNECTION_STRING, or use abfs://container@account.dfs.core.windows.net/..."
            )
        return account

    def _address(self, url: str, *, container_only: bool = False) -> tuple[str, str, str]:
        """``(account, origin, path)`` of ``url``'s blob (or of its container)."""
        named, container, blob = parse_azure_url(url)
        account = self._account(url, named)
        parts = urlsplit(self._endpoint(account))
        path = f"{parts.path.rstrip('/')}/{container}"
        if blob and not container_only:
            path += f"/{quote(blob, safe='/~')}"
        return account, f"{parts.scheme}://{parts.netloc}", path

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        *,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        container: bool = False,
    ) -> tuple[str, PooledBody]:
        account, origin, path = self._address(url, container_only=container)
        sent = {"x-ms-version": API_VERSION, **headers}
        if body is not None:
            sent["Content-Length"] = str(len(body))
        query_string = self._authorize(url, method, path, query, sent)
        target = f"{origin}{path}" + (f"?{query_string}" if query_string else "")
        return account, self.pool.request(method, target, headers=sent, body=body)

    def _authorize(
        self, url: str, method: str, path: str, query: Sequence[tuple[str, str]], headers: dict[str, str]
    ) -> str:
        """The credential's ``authorize`` for a request about ``url``; no token (Entra ID) is an
        AccessDeniedError naming ``url``, without the chain (the message has its cause)."""
        try:
            return self.credential.authorize(method, path, query, headers)
        except AccessDeniedError as exc:
            raise AccessDeniedError(f"{redact_url(url)}: {exc}", url=url) from None
        except SourceError:
            raise
        except Exception as exc:  # (azure-identity's own errors: a token that could not be had)
            raise self.translate(exc, url) from exc

    def exchange(
        self,
        method: str,
        url: str,
        *,
        action: str,
        headers: Mapping[str, str] | None = None,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        container: bool = False,
    ) -> _Reply:
        """One request whose whole answer is read; an error answer raises the matching
        shardstream error (:func:`azure_error`), a network fault a TransientSourceError."""
        account = self._account(url, parse_azure_url(url)[0])
        try:
            account, pooled = self._send(
                method, url, headers or {}, query=query, body=body, container=container
            )
            resp = pooled.response
            content = pooled.read_all(self.body_limit())
            pooled.finish()
        except SourceError:
            raise
        except Exception as exc:
            raise network_error(exc, url, endpoint=self._endpoint(account)) from exc
        reply = _Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, content)
        if reply.status >= 300:
            code = reply.headers.get("x-ms-error-code") or code_in(content)
            raise azure_error(
                reply.status, code, url, account=account, credential=self.credential, action=action
            )
        return reply

    def retrying(self, call: Callable[[], _T], url: str) -> _T:
        """``call()``, retried on TransientSourceError within the retry budget."""
        return self.policy.call(call, redact_url(url))

    def _endpoint(self, account: str) -> str:
        return self.endpoint_url or f"https://{account}.blob.core.windows.net"

    # -- reading ----------------------------------------------------------------------------------

    def _opener(self, url: str, end: int | None, offset: int, etag: str | None) -> Opened:
        headers = {"Accept-Encoding": "identity"}
        byte_range = range_header(offset, end)
        if byte_range is not None:
            headers["x-ms-range"] = byte_range
        if etag:
            headers["If-Match"] = etag
        account, body = self._send("GET", url, headers)
        resp = body.response
        if resp.status == 416 and byte_range is not None:
            return beyond_end(body)  # InvalidRange: the range starts at or past the blob's end
        if resp.status >= 300:
            code = resp.getheader("x-ms-error-code")
            body.close()
            raise azure_error(resp.status, code, url, account=account, credential=self.credential)
        if resp.status == 206:
            size = content_range_total(resp.getheader("Content-Range"))
        else:
            length = resp.getheader("Content-Length")
            size = int(length) if length and length.isdigit() else None
            if offset:
                body.close()
                raise SourceError(f"{redact_url(url)}: the server ignored the range request", url=url)
        return Opened(body, size, resp.getheader("ETag"))

    def translate(self, exc: BaseException, url: str) -> SourceError:
        """The shardstream error for a network exception on ``url``."""
        named = parse_azure_url(url)[0] or self.account or ""
        return network_error(exc, url, endpoint=self._endpoint(named))

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``az://container/blob`` (to the end when
        ``length`` is ``None``); transient faults are retried and resumed at the byte offset."""
        self._check_blob(url)
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

    def get_request(
        self, url: str, offset: int = 0, length: int | None = None, *, etag: str | None = None
    ) -> tuple[Key, bytes]:
        """``(address, request bytes)`` of one authorized Get Blob of ``url`` (bytes ``[offset,
        offset + length)`` with ``x-ms-range`` when asked; ``If-Match: etag`` when given), for the
        whole-body client (:meth:`get_into`, :mod:`._epoll_gets`)."""
        _, origin, path = self._address(url)
        headers = {"x-ms-version": API_VERSION, "Accept-Encoding": "identity"}
        if offset or length is not None:  # (an empty range asks for one byte, cut by the caller)
            last = offset if length is None or length < 1 else offset + length - 1
            headers["x-ms-range"] = f"bytes={offset}-{'' if length is None else last}"
        if etag:
            headers["If-Match"] = etag
        query = self._authorize(url, "GET", path, (), headers)
        parts = urlsplit(origin)
        headers["Host"] = parts.netloc
        scheme = parts.scheme.lower()
        key = (scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
        return key, render_request("GET", path + (f"?{query}" if query else ""), headers)

    def answer_error(self, status: int, head: bytes, body: bytes, url: str) -> SourceError:
        """The error for an error ``status`` of a Get Blob of ``url`` (the code from
        ``x-ms-error-code`` in ``head``, else the body's)."""
        account = self._account(url, parse_azure_url(url)[0])
        code = header_value(head, b"x-ms-error-code") or code_in(body)
        return azure_error(status, code, url, account=account, credential=self.credential)

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
        """One Get Blob of bytes ``[offset, offset + length)`` of ``url`` on the whole-body
        client, appended to ``sink`` after the bytes of the range already there (a resume, pinned
        by ``If-Match: etag``). Returns the blob's ETag. No retries (the object fetcher retries,
        lowering its requests in flight when throttled). Bounded by the range's length or ``size``
        (the blob's, when the caller knows it), else by ``max_body``: past it,
        ResponseTooLargeError."""
        start = len(sink)
        at = offset + start
        end = None if length is None else offset + length
        if end is not None and start and at >= end:
            return etag  # (a resume of a range that is complete)
        ranged = bool(at) or end is not None
        key, request = self.get_request(url, at, None if end is None else end - at, etag=etag)
        try:
            resp = self.whole.send(key, request, sink, expect=expect(at, end, size))
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from exc
        status = resp.status
        if status >= 300:
            body = bytes(sink[start:])
            del sink[start:]
            if status == 416 and ranged:  # InvalidRange: the range starts at or past the end
                return resp.headers.get("etag") or etag
            raise self.answer_error(status, b"", body, url)
        settle_range(status, resp.headers.get("content-range"), sink, start, at, end, url)
        return resp.headers.get("etag") or etag

    def get_many(self, *, window: int) -> ManyGets:
        """Whole blobs or byte ranges many at a time on this thread's ``epoll`` loop
        (:mod:`._epoll_gets`); where ``epoll`` is missing, the default (``get_into`` on threads)."""
        if MULTIPLEX_AVAILABLE:
            return EpollGets(self)
        return super().get_many(window=window)

    def stat(self, url: str) -> ObjectInfo:
        """Size and ETag from a ``HEAD`` (Get Blob Properties)."""
        self._check_blob(url)
        reply = self.retrying(lambda: self.exchange("HEAD", url, action="stat"), url)
        length = reply.headers.get("content-length", "")
        return ObjectInfo(size=int(length) if length.isdigit() else None, etag=reply.headers.get("etag"))

    def _check_blob(self, url: str) -> None:
        """ConfigurationError for a URL without a blob name or an account (before any request)."""
        named, _, blob = parse_azure_url(url)
        if not blob:
            raise ConfigurationError(f"{redact_url(url)} names a container but no blob")
        self._account(url, named)

    # -- listing ----------------------------------------------------------------------------------

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Every blob under ``az://container/prefix/`` (List Blobs, all pages in sequence, at most
        ``maxresults`` per page); keys relative to the prefix."""
        key_prefix = parse_azure_url(prefix)[2]
        marker = ""
        while True:
            query = [("restype", "container"), ("comp", "list"), ("maxresults", str(self.maxresults))]
            if key_prefix:
                query.append(("prefix", key_prefix))
            if marker:
                query.append(("marker", marker))
            page = self.retrying(
                functools.partial(self.exchange, "GET", prefix, action="list", query=query, container=True),
                prefix,
            )
            listed, marker = list_page(page.body, key_prefix)
            yield from listed
            if not marker:
                return

    # -- writing ----------------------------------------------------------------------------------

    def create(self, url: str) -> BinaryIO:
        """Open ``az://container/blob`` for writing: blocks are uploaded as they fill and committed
        on close (see :mod:`._azure_writer`); nothing is visible before."""
        self._check_blob(url)
        return cast(BinaryIO, AzureWriter(self, url))

    def close(self) -> None:
        self.pool.close()
        self.whole.close()
