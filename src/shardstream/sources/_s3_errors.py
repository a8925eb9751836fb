"""S3 failures -> shardstream errors: the error-code table, its messages and the botocore mapping.

Two entry points, both used by :class:`~shardstream.sources.s3.S3Source`:

* :func:`s3_error` for an S3 error *response* (HTTP status plus the ``<Code>`` of the XML body,
  read by :func:`error_code`); codes not in :data:`_CODES` fall back to the HTTP status.
* :func:`translate` for an *exception* (botocore, socket or ``http.client``), raised ``from`` the
  original by the caller (``from cause(exc)``, where a missing credential's chain says nothing more).

botocore is imported only inside :func:`translate`, so importing this module stays SDK-free.
"""

from __future__ import annotations

import re

from ..errors import (
    AccessDeniedError,
    ShardNotFoundError,
    SourceError,
    TransientSourceError,
    redact_url,
)
from ..net.pool import PooledBody
from ._resume import ObjectChangedError
from ._status import network_error, status_error

__all__ = ["cause", "code_in", "error_code", "s3_error", "translate"]

_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")

# S3 error code -> (error class, likely fix). Codes not listed fall back to the HTTP status.
_CODES: dict[str, tuple[type[SourceError], str]] = {
    "NoSuchKey": (
        ShardNotFoundError,
        "no object has this key; check the key and the shard spec (brace ranges)",
    ),
    "NoSuchBucket": (
        ShardNotFoundError,
        "the bucket does not exist at this endpoint; check the bucket name, endpoint_url and region",
    ),
    "AccessDenied": (
        AccessDeniedError,
        "the credentials lack permission for this object (s3:GetObject/PutObject), or the bucket "
        "is private and anon=True was used; check the credentials, profile and bucket policy",
    ),
    "AllAccessDisabled": (AccessDeniedError, "all access to this object is disabled by its owner"),
    "InvalidAccessKeyId": (
        AccessDeniedError,
        "the endpoint does not know this access key id; check AWS_ACCESS_KEY_ID, the profile or "
        "storage_options['access_key_id'], and endpoint_url",
    ),
    "SignatureDoesNotMatch": (
        AccessDeniedError,
        "the secret access key does not match the access key id; check AWS_SECRET_ACCESS_KEY, "
        "the profile or storage_options['secret_access_key']",
    ),
    "ExpiredToken": (
        AccessDeniedError,
        "the session token expired; refresh the credentials (aws sso login, or new STS credentials)",
    ),
    "InvalidToken": (AccessDeniedError, "the session token is malformed or invalid; refresh the credentials"),
    "TokenRefreshRequired": (AccessDeniedError, "the session token must be refreshed"),
    "RequestTimeTooSkewed": (
        AccessDeniedError,
        "this machine's clock differs too much from the server's; sync the clock (NTP)",
    ),
    "PermanentRedirect": (
        SourceError,
        "the bucket is in another region; pass region= (or set AWS_REGION) to the bucket's region",
    ),
    "TemporaryRedirect": (
        SourceError,
        "S3 redirects requests for this bucket to another region (new buckets do this for a "
        "while); pass region= (or set AWS_REGION) to the bucket's region",
    ),
    "AuthorizationHeaderMalformed": (
        SourceError,
        "the request was signed for the wrong region; pass region= (or set AWS_REGION) to the "
        "bucket's region",
    ),
    "PreconditionFailed": (
        ObjectChangedError,
        "the object changed while it was being read; read the shard again",
    ),
    "SlowDown": (TransientSourceError, "the server is throttling requests; it is retried with backoff"),
    "ServiceUnavailable": (TransientSourceError, "the service is temporarily unavailable; it is retried"),
    "InternalError": (TransientSourceError, "the server failed internally; it is retried"),
    "RequestTimeout": (TransientSourceError, "the request timed out at the server; it is retried"),
}


def s3_error(
    status: int, code: str | None, url: str, *, action: str = "open", endpoint: str = ""
) -> SourceError:
    """The shardstream error for an S3 error response: message with URL, status, code and fix."""
    if code in _CODES:
        cls, fix = _CODES[code]
        where = f" at endpoint {redact_url(endpoint)}" if endpoint else ""
        safe = redact_url(url)
        return cls(f"cannot {action} {safe}{where}: HTTP {status} {code}. {fix}.", url=safe, status=status)
    if status == 404:
        fix = "no such key or no such bucket; check the URL, the bucket name and endpoint_url"
    elif status in (401, 403):
        fix = "access refused; check the credentials (AWS_* variables, profile or storage_options)"
    elif 300 <= status < 400:
        fix = (
            "the endpoint redirected the request (signed requests are not followed to another "
            "host); pass region= for the bucket's region, or check endpoint_url"
        )
    else:
        fix = ""
    detail = code or ""
    if endpoint:
        detail = (
            f"{detail}, endpoint {redact_url(endpoint)}" if detail else f"endpoint {redact_url(endpoint)}"
        )
    return status_error(status, url, action=action, detail=detail, fix=fix)


def error_code(body: PooledBody) -> str | None:
    """The ``<Code>`` of an S3 XML error body (first 2 KiB), or None; always closes ``body``."""
    try:
        buf = bytearray(2048)
        view = memoryview(buf)
        n = 0
        while n < len(buf) and (got := body.readinto(view[n:])):
            n += got
        return code_in(bytes(buf[:n]))
    except Exception:
        return None
    finally:
        body.close()


def code_in(data: bytes) -> str | None:
    """The ``<Code>`` of an S3 XML error body already read (its first 2 KiB are searched)."""
    match = _CODE.search(data[:2048])
    return match.group(1).decode("ascii", "replace") if match else None


def cause(exc: BaseException) -> BaseException | None:
    """What to chain :func:`translate`'s error to (``raise translate(exc, ...) from cause(exc)``):
    ``exc``, except for missing credentials, whose botocore traceback (two of them: the lookup is
    retried once) adds nothing to the message, which quotes botocore's words and names the fix."""
    from botocore import exceptions as bx

    return None if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError) else exc


def translate(exc: BaseException, url: str, action: str = "open", *, endpoint: str) -> SourceError:
    """Map a botocore, socket or ``http.client`` exception to a shardstream error."""
    if isinstance(exc, SourceError):
        return exc
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return s3_error(status, err.get("Code"), url, action=action, endpoint=endpoint)
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        where = f" at endpoint {redact_url(endpoint)}" if endpoint else ""
        return AccessDeniedError(
            f"cannot {action} {redact_url(url)}{where}: no AWS credentials found (botocore: "
            f"{redact_url(exc)}). Pass them in storage_options: key= and secret= (and token= for "
            "temporary ones), or profile= (a profile of ~/.aws/config), or anon=True for a public "
            "bucket; endpoint_url= names an S3 server other than AWS (on the command line: "
            "--storage-option key=... --storage-option secret=...). Or set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE.",
            url=url,
        )
    if isinstance(exc, bx.EndpointConnectionError):
        return TransientSourceError(
            f"cannot {action} {redact_url(url)}: could not connect to endpoint "
            f"{redact_url(endpoint)}. Check that the server is running and endpoint_url "
            "is right.",
            url=url,
        )
    if isinstance(exc, bx.ConnectTimeoutError | bx.ReadTimeoutError | bx.ConnectionClosedError):
        return TransientSourceError(
            f"cannot {action} {redact_url(url)}: {type(exc).__name__} talking to "
            f"{redact_url(endpoint)}; it is retried",
            url=url,
        )
    if isinstance(exc, bx.BotoCoreError):
        return SourceError(f"cannot {action} {redact_url(url)}: {redact_url(exc)}", url=url)
    return network_error(exc, url, endpoint=endpoint)
