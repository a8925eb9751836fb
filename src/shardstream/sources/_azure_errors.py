"""Azure Blob Storage's error answers as shardstream errors, ``az://``/``abfs[s]://`` URLs, and
the XML of List Blobs pages.

An error names the URL (redacted), the account, the kind of credential used (never its secret)
and what to do; the code comes from ``x-ms-error-code`` or the XML body's ``<Code>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from urllib.parse import unquote

from ..errors import (
    AccessDeniedError,
    ConfigurationError,
    ObjectChangedError,
    ShardNotFoundError,
    SourceError,
    redact_url,
)
from ._azure_auth import Bearer, Credential, Sas, SharedKey
from ._status import status_error
from .base import Listed

__all__ = ["azure_error", "code_in", "list_page", "parse_azure_url"]

_SCHEMES = ("az", "abfs", "abfss")


def parse_azure_url(url: str) -> tuple[str | None, str, str]:
    """``(account or None, container, blob)`` of ``az://container/blob`` or
    ``abfs[s]://container@account.dfs.core.windows.net/blob``; the blob name is taken whole
    (``?`` and ``#`` are part of it)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        raise ConfigurationError(f"{redact_url(url)} is not an az://container/blob URL")
    netloc, _, blob = rest.partition("/")
    account: str | None = None
    container = netloc
    if "@" in netloc:
        container, _, host = netloc.partition("@")
        account = host.split(".", 1)[0] or None
    if not container:
        raise ConfigurationError(
            f"{redact_url(url)} names no container; use az://container/path/to/blob or "
            "abfs://container@account.dfs.core.windows.net/path/to/blob"
        )
    return account, container, blob


def code_in(body: bytes) -> str | None:
    """The ``<Code>`` of an Azure error body, if it has one."""
    if not body.lstrip().startswith(b"<"):
        return None
    try:
        found = ET.fromstring(body).findtext("Code")
    except ET.ParseError:
        return None
    return found.strip() if found else None


_AUTH_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationServiceMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationSourceIPMismatch",
        "InsufficientAccountPermissions",
        "NoAuthenticationInformation",
        "PublicAccessNotPermitted",
    }
)


def _denied_fix(credential: Credential, account: str, code: str | None, action: str) -> str:
    if isinstance(credential, Sas):
        if credential.expired():
            return (
                f"The SAS token expired at se={credential.expiry}; create a new one (sas_token= or "
                "AZURE_STORAGE_SAS_TOKEN)"
            )
        return (
            f"SAS token expired or lacks permission for this {action} (it grants sp="
            f"{credential.permissions or '?'}; reading needs r, listing l, writing c and w), or it "
            "was made for another container or account; create one that covers this"
        )
    if isinstance(credential, SharedKey):
        return (
            f"The shared key signature was refused: check that account_key (or AccountKey= in the "
            f"connection string) is a current key of account {account!r} and that the machine's "
            "clock is right"
        )
    if isinstance(credential, Bearer):
        return (
            f"The Entra ID identity lacks a data role on account {account!r}: assign 'Storage Blob "
            "Data Reader' (or 'Contributor' to write) on the container or account"
        )
    return (
        "Anonymous access was refused: the container does not allow public access; pass "
        "credentials (account_key=, sas_token=, connection_string=) in storage_options"
    )


def azure_error(
    status: int,
    code: str | None,
    url: str,
    *,
    account: str,
    credential: Credential,
    action: str = "open",
) -> SourceError:
    """The shardstream error for an Azure error answer (``x-ms-error-code`` or ``<Code>``), naming
    the URL, the account, the kind of credential used (never its secret) and the fix."""
    shown = redact_url(url)
    what = f"cannot {action} {shown} (account {account!r}, {credential.kind}): HTTP {status}" + (
        f" {code}" if code else ""
    )
    if code == "ContainerNotFound":
        container = parse_azure_url(url)[1]
        return ShardNotFoundError(
            f"{what}. The container {container!r} does not exist in account {account!r}: check "
            "the container name, account_name and endpoint_url",
            url=url,
            status=status,
        )
    if status == 404 and code in (None, "BlobNotFound"):
        return ShardNotFoundError(
            f"{what}. The blob does not exist; check the URL and the shard spec", url=url, status=status
        )
    if status == 404:  # ResourceNotFound: the account (path-style endpoints) or the container
        return ShardNotFoundError(
            f"{what}. Check the account name {account!r}, the endpoint and the container name",
            url=url,
            status=status,
        )
    if status in (401, 403) or code in _AUTH_CODES:
        return AccessDeniedError(
            f"{what}. {_denied_fix(credential, account, code, action)}", url=url, status=status
        )
    if status == 412 or code == "ConditionNotMet":
        return ObjectChangedError(
            f"{what}. The blob changed while it was being read; read the shard again", url=url, status=412
        )
    if code in ("InvalidResourceName", "OutOfRangeInput", "InvalidUri"):
        return SourceError(
            f"{what}. The container or blob name is not valid for Azure (containers: 3-63 lower-case "
            "letters, digits and single hyphens)",
            url=url,
            status=status,
        )
    detail = f"{code + ', ' if code else ''}account {account!r}, {credential.kind}"
    return status_error(status, url, action=action, detail=detail)


def list_page(body: bytes, key_prefix: str) -> tuple[list[Listed], str]:
    """The blobs of one List Blobs page under ``key_prefix`` (names relative to it; folder
    markers left out) and the page's ``NextMarker`` (empty on the last page)."""
    root = ET.fromstring(body)
    found = []
    for blob in root.iterfind("Blobs/Blob"):
        name_node = blob.find("Name")
        name = (name_node.text or "") if name_node is not None else ""
        if name_node is not None and name_node.get("Encoded") == "true":
            name = unquote(name)
        if name.endswith("/") or not name.startswith(key_prefix):
            continue
        size = blob.findtext("Properties/Content-Length") or "-1"
        found.append(Listed(name[len(key_prefix) :], int(size), blob.findtext("Properties/Etag") or ""))
    return found, root.findtext("NextMarker") or ""
