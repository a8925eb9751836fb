"""AWS Signature Version 4 for S3 requests, with the day's signing key cached.

botocore resolves the credentials (environment, profiles, SSO, instance roles, refreshable
session tokens) and the region; this module only turns them into an ``Authorization`` header.
botocore's own signer (and ``generate_presigned_url``) rebuilds the request object, the
canonical request and the four-step HMAC key derivation for every call, more client CPU than
the rest of a GET; deriving the signing key once per (secret, day, region) and signing a
fixed-shape GET costs a small part of that (``benchmarks/results/bench_objects.md``, "Client CPU
per signed GET", compares a signed GET of ours with botocore's presigning and with boto3).

Only what an object GET/HEAD needs is covered: the ``host``, ``x-amz-content-sha256``,
``x-amz-date`` and (with temporary credentials) ``x-amz-security-token`` headers are signed;
``Range`` and ``If-Match`` travel unsigned, which SigV4 allows. Everything else (listing,
multipart uploads) still goes through botocore, where per-request cost does not matter.

Rejected: presigned query strings (the same HMAC work plus longer URLs; and a presigned URL in a
log line is a credential), and signing with ``botocore.auth.S3SigV4Auth`` (a request object and a
key derivation per call: it is the cost this module removes).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple
from urllib.parse import quote

__all__ = ["EMPTY_SHA256", "UNSIGNED_PAYLOAD", "Credentials", "SigV4Signer", "uri_encode"]

#: SHA-256 of the empty body (GET and HEAD requests).
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"


class Credentials(NamedTuple):
    """One frozen set of credentials (botocore's ``ReadOnlyCredentials`` has the same fields)."""

    access_key: str
    secret_key: str
    token: str | None = None


#: Returns the current credentials (a refreshable provider may return new ones at any call).
CredentialsProvider = Callable[[], Credentials]


def uri_encode(path: str) -> str:
    """An S3 key path as SigV4 wants it: every byte but ``A-Za-z0-9-._~`` and ``/`` percent-encoded."""
    return quote(path, safe="/~")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.digest(key, text.encode(), "sha256")


class SigV4Signer:
    """Signs requests for one region and service, caching the day's signing key.

    Args:
        credentials: called per request for the current credentials (cheap for static keys;
            botocore's refreshable credentials refresh themselves inside this call).
        region: signing region, e.g. ``"us-east-1"``.
        service: signing service name (default ``"s3"``).
        clock: seconds since the epoch (injectable for test vectors).
    """

    def __init__(
        self,
        credentials: CredentialsProvider,
        region: str,
        service: str = "s3",
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = credentials
        self.region = region
        self.service = service
        self._clock = clock
        self._scope_tail = f"/{region}/{service}/aws4_request"
        self._key: tuple[str, str, bytes] | None = None  # (secret, date stamp, key)
        self._stamp: tuple[int, str] = (-1, "")  # (second, x-amz-date) of the last request

    def __repr__(self) -> str:
        return f"SigV4Signer(region={self.region!r}, service={self.service!r})"

    def signing_key(self, secret: str, datestamp: str) -> bytes:
        """The derived key for ``secret`` on ``datestamp`` (``YYYYMMDD``), computed once per day."""
        cached = self._key
        if cached is not None and cached[0] == secret and cached[1] == datestamp:
            return cached[2]
        key = _hmac(("AWS4" + secret).encode(), datestamp)
        for part in (self.region, self.service, "aws4_request"):
            key = _hmac(key, part)
        self._key = (secret, datestamp, key)
        return key

    def _amz_date(self) -> str:
        now = self._clock()
        second = int(now)
        if self._stamp[0] != second:
            self._stamp = (second, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second)))
        return self._stamp[1]

    def sign(
        self,
        method: str,
        host: str,
        path: str,
        *,
        query: str = "",
        headers: Mapping[str, str] | None = None,
        payload_hash: str = EMPTY_SHA256,
    ) -> dict[str, str]:
        """The headers to send with the request: ``Host``, the ``x-amz-*`` headers and
        ``Authorization``.

        Args:
            method: ``"GET"``, ``"HEAD"``, ...
            host: the ``Host`` header exactly as sent (``name`` or ``name:port``).
            path: the request path, already URI-encoded (see :func:`uri_encode`).
            query: the canonical query string (parameters sorted and encoded), usually empty.
            headers: extra headers to sign (lower-case names), e.g. ``{"range": "bytes=0-9"}``.
            payload_hash: hex SHA-256 of the body, or ``UNSIGNED-PAYLOAD``.
        """
        creds = self._credentials()
        amz_date = self._amz_date()
        datestamp = amz_date[:8]
        signed: dict[str, str] = {
            "host": host,
            "x-amz-content-sha256": payload_hash,
            "x-amz-date": amz_date,
        }
        if creds.token:
            signed["x-amz-security-token"] = creds.token
        if headers:
            signed.update((k.lower(), v.strip()) for k, v in headers.items())
        names = sorted(signed)
        canonical_headers = "".join(f"{n}:{signed[n]}\n" for n in names)
        signed_names = ";".join(names)
        canonical = f"{method}\n{path}\n{query}\n{canonical_headers}\n{signed_names}\n{payload_hash}"
        scope = datestamp + self._scope_tail
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        # hmac.digest: OpenSSL's one-shot HMAC, a few microseconds less than an hmac.new object
        signature = hmac.digest(
            self.signing_key(creds.secret_key, datestamp), to_sign.encode(), "sha256"
        ).hex()
        out = {"Host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
        if creds.token:
            out["x-amz-security-token"] = creds.token
        out["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
            f"SignedHeaders={signed_names}, Signature={signature}"
        )
        return out

    def header_lines(self, method: str, host: str, path: str, payload_hash: str = EMPTY_SHA256) -> str:
        """What :meth:`sign` returns for a request with no query and no extra signed headers,
        as ``Name: value\\r\\n`` lines ready to send: the per-object GET of the objects' fetch
        loop, where :meth:`sign`'s dict, sort and joins are a third of its cost."""
        creds = self._credentials()
        amz_date = self._amz_date()
        datestamp = amz_date[:8]
        token = creds.token
        if token:
            names = "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
            extra = f"x-amz-security-token:{token}\n"
        else:
            names, extra = "host;x-amz-content-sha256;x-amz-date", ""
        canonical = (
            f"{method}\n{path}\n\nhost:{host}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n"
            f"{extra}\n{names}\n{payload_hash}"
        )
        scope = datestamp + self._scope_tail
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.digest(
            self.signing_key(creds.secret_key, datestamp), to_sign.encode(), "sha256"
        ).hex()
        token_line = f"x-amz-security-token: {token}\r\n" if token else ""
        return (
            f"Host: {host}\r\nx-amz-content-sha256: {payload_hash}\r\nx-amz-date: {amz_date}\r\n{token_line}"
            f"Authorization: AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}\r\n"
        )
