"""Google Cloud Storage's error answers as shardstream errors: the URL, the credentials used
(never their secret) and what to do; GCS's own message comes from its JSON error body."""

from __future__ import annotations

import json

from ..errors import SourceError, redact_url
from ..net.pool import PooledBody
from ._status import status_error

__all__ = ["error_detail", "gcs_error"]


def error_detail(body: PooledBody | None, data: bytes | None = None) -> str:
    """GCS's error message (``{"error": {"code", "message"}}``), or the first bytes of the body."""
    if data is None and body is not None:
        try:
            data = body.response.read(4096)
        except Exception:
            data = b""
        finally:
            body.close()
    text = (data or b"").decode("utf-8", "replace")
    try:
        message = json.loads(text)["error"]["message"]
        return redact_url(str(message))[:300]
    except (ValueError, KeyError, TypeError):
        return redact_url(text.strip().replace("\n", " "))[:200]


def gcs_error(
    status: int, url: str, detail: str, *, action: str, credentials: str, endpoint: str
) -> SourceError:
    """The shardstream error for an error ``status`` of a request about ``url`` (``credentials``:
    what kind were used, e.g. ``anonymous``; ``endpoint``: the storage endpoint)."""
    bucket = url.partition("://")[2].partition("/")[0]
    if status in (401, 403):
        write = action == "write"
        fix = (
            f"Access was refused to the {credentials}: check that they may "
            f"{'write to' if write else 'read'} bucket {bucket!r} (role roles/storage.object"
            f"{'User' if write else 'Viewer'}), or pass storage_options={{'token': ...}} (a key "
            "file path or its JSON text, an access token, or 'anon' for a public bucket)"
        )
    elif status == 404 and action == "list":
        fix = (
            f"The bucket {bucket!r} does not exist at {redact_url(endpoint)}; check the "
            "bucket name and endpoint_url"
        )
    elif status == 404:
        fix = (
            f"No such object, or no bucket {bucket!r} at {redact_url(endpoint)}; check "
            "the URL, the shard spec and endpoint_url"
        )
    else:
        fix = ""
    return status_error(status, url, action=action, detail=detail, fix=fix)
