"""Azure Storage credentials for the ``az://`` source: Shared Key signing, SAS tokens, Entra ID
bearer tokens, anonymous access, and connection strings.

Each credential is an object with a ``kind`` (named in error messages, never its secret) and
``authorize(method, path, query, headers) -> query string``, which adds what the request needs:
an ``Authorization`` header (Shared Key, bearer) or the SAS parameters appended to the query.

Shared Key follows the Blob service's rules for version 2009-09-19 and later: HMAC-SHA256, keyed
with the base64-decoded account key, over the verb, twelve standard headers (``Content-Length``
empty when zero), the ``x-ms-*`` headers (lower-cased, sorted, ``name:value``) and the
canonicalized resource (``/account`` + the encoded URI path, then each query parameter,
lower-cased and sorted, as ``\\nname:value`` with its decoded value). :func:`container_sas`
computes a service SAS for a container (version 2020-12-06 string-to-sign), for tests and tools.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import hashlib
import hmac
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote

from ..config import StoreEnv
from ..errors import AccessDeniedError, ConfigurationError, redact_url
from ..forks import ForkSafeLock

__all__ = [
    "DEV_ACCOUNT",
    "DEV_KEY",
    "SCOPE",
    "Anonymous",
    "Bearer",
    "ConnectionString",
    "Credential",
    "Sas",
    "SharedKey",
    "choose_credential",
    "container_sas",
    "default_credential",
    "encode_query",
    "parse_connection_string",
]

#: Azurite's (and the old storage emulator's) well-known development account and key.
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: The OAuth scope of Azure Storage for Entra ID tokens.
SCOPE = "https://storage.azure.com/.default"
_REFRESH_AHEAD = 300.0  # seconds before expiry a bearer token is renewed
_SIGNED_HEADERS = (
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
)

Query = Sequence[tuple[str, str]]


def encode_query(query: Query) -> str:
    """``name=value&...`` with names and values percent-encoded."""
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in query)


class Credential(Protocol):
    """How a request to Azure Storage is authorized."""

    #: What the credential is, for messages: ``shared key``, ``SAS``, ``bearer token``, ``anonymous``.
    kind: str

    def authorize(self, method: str, path: str, query: Query, headers: dict[str, str]) -> str:
        """Add the request's authorization to ``headers``; returns its encoded query string."""
        ...


class SharedKey:
    """Shared Key (account key) signing of each request.

    Args:
        account: the storage account name.
        key: the account key, base64 as the portal shows it. Never logged or shown.
    """

    kind = "shared key"

    def __init__(self, account: str, key: str) -> None:
        try:
            self._key = base64.b64decode(key, validate=True)
        except ValueError:
            raise ConfigurationError(
                f"the account key for Azure account {account!r} is not base64; copy it whole from the "
                "portal (Access keys) or the connection string's AccountKey="
            ) from None
        self.account = account

    def __repr__(self) -> str:
        return f"SharedKey(account={self.account!r})"

    def signature(self, text: str) -> str:
        """Base64 HMAC-SHA256 of ``text`` with the account key."""
        return base64.b64encode(hmac.new(self._key, text.encode("utf-8"), hashlib.sha256).digest()).decode()

    def authorize(self, method: str, path: str, query: Query, headers: dict[str, str]) -> str:
        headers["x-ms-date"] = email.utils.formatdate(usegmt=True)
        lower = {k.lower(): v.strip() for k, v in headers.items()}
        if lower.get("content-length") == "0":
            lower["content-length"] = ""  # version 2015-02-21+: a zero length is signed empty
        standard = [lower.get(name, "") for name in _SIGNED_HEADERS]
        ms = "".join(f"{k}:{lower[k]}\n" for k in sorted(k for k in lower if k.startswith("x-ms-")))
        values: dict[str, list[str]] = {}
        for name, value in query:
            values.setdefault(name.lower(), []).append(value)
        resource = f"/{self.account}{path}" + "".join(
            f"\n{name}:{','.join(sorted(values[name]))}" for name in sorted(values)
        )
        text = "\n".join([method.upper(), *standard]) + "\n" + ms + resource
        headers["Authorization"] = f"SharedKey {self.account}:{self.signature(text)}"
        return encode_query(query)


class Sas:
    """A shared access signature appended to every request's query string.

    Args:
        token: the SAS (``sv=...&sig=...``, with or without a leading ``?``). Never logged: the
            ``sig`` parameter is what grants access (``redact_url`` hides it).
    """

    kind = "SAS"

    def __init__(self, token: str) -> None:
        self.token = token.strip().lstrip("?")
        fields = dict(parse_qsl(self.token, keep_blank_values=True))
        if "sig" not in fields:
            raise ConfigurationError(
                "the SAS token has no sig= parameter; pass the whole token (sv=...&se=...&sig=...) as "
                "sas_token= or AZURE_STORAGE_SAS_TOKEN"
            )
        self.expiry = fields.get("se", "")
        self.permissions = fields.get("sp", "")

    def __repr__(self) -> str:
        return f"Sas(expiry={self.expiry!r}, permissions={self.permissions!r})"

    def expired(self) -> bool:
        """Whether the token's ``se`` (expiry) time has passed."""
        try:
            when = datetime.datetime.fromisoformat(self.expiry.replace("Z", "+00:00"))
        except ValueError:
            return False
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        return when <= datetime.datetime.now(datetime.timezone.utc)

    def authorize(self, method: str, path: str, query: Query, headers: dict[str, str]) -> str:
        own = encode_query(query)
        return f"{own}&{self.token}" if own else self.token


class Anonymous:
    """No credentials: public containers (read and list only)."""

    kind = "anonymous"

    def __repr__(self) -> str:
        return "Anonymous()"

    def authorize(self, method: str, path: str, query: Query, headers: dict[str, str]) -> str:
        return encode_query(query)


def default_credential() -> Any:
    """``azure.identity.DefaultAzureCredential()`` (environment, workload identity, managed
    identity, ``az login``, ...); ImportError naming the extra when azure-identity is missing."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError as exc:
        raise ImportError(
            "az:// without an account key, SAS token or connection string uses Entra ID through "
            "azure-identity, which is not installed: pip install 'shardstream[azure]' (or pass "
            "account_key=, sas_token=, connection_string= or anon=True in storage_options)"
        ) from exc
    return DefaultAzureCredential()


class Bearer:
    """An Entra ID (OAuth) token from an azure-identity ``TokenCredential``, as
    ``Authorization: Bearer``; renewed five minutes before it expires, one caller at a time.

    Args:
        credential: a ``TokenCredential`` (anything with ``get_token(scope)``), or ``None`` to
            build ``DefaultAzureCredential`` (again in a forked child, whose parent's credential
            may hold an HTTP session).
        factory: builds the credential when ``credential`` is ``None``.
    """

    kind = "bearer token"

    def __init__(self, credential: Any = None, factory: Callable[[], Any] = default_credential) -> None:
        self._own = credential is None
        self._factory = factory
        self._credential = factory() if credential is None else credential
        self._pid = os.getpid()
        self._token: str | None = None
        self._expires = 0.0
        self._lock = ForkSafeLock()

    def __repr__(self) -> str:
        return f"Bearer(credential={type(self._credential).__name__})"

    def token(self) -> str:
        """A valid access token (fetched or renewed when needed)."""
        with self._lock:
            if self._own and self._pid != os.getpid():
                self._credential, self._pid = self._factory(), os.getpid()
            if self._token is None or self._expires - time.time() < _REFRESH_AHEAD:
                try:
                    got = self._credential.get_token(SCOPE)
                except Exception as exc:  # azure.core ClientAuthenticationError and the like
                    # The chain (azure-identity's list of every credential it tried, a traceback
                    # each) is left out: its first line is the cause; the fix is below.
                    said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                    raise AccessDeniedError(
                        f"no Entra ID token for Azure Storage from {type(self._credential).__name__} "
                        f"({type(exc).__name__}{': ' + redact_url(said) if said else ''}). Pass "
                        "credentials in storage_options: account_key= (with account_name=), "
                        "sas_token= or connection_string=, or anon=True for a public container (on "
                        "the command line: --storage-option account_key=...). Or set "
                        "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME and "
                        "AZURE_STORAGE_ACCOUNT_KEY, or AZURE_STORAGE_SAS_TOKEN; or sign in for Entra "
                        "ID (`az login`, a managed identity, AZURE_CLIENT_ID/AZURE_TENANT_ID/"
                        "AZURE_CLIENT_SECRET)",
                    ) from None
                self._token, self._expires = str(got.token), float(got.expires_on)
            return self._token

    def authorize(self, method: str, path: str, query: Query, headers: dict[str, str]) -> str:
        headers["Authorization"] = f"Bearer {self.token()}"
        return encode_query(query)


@dataclass(frozen=True)
class ConnectionString:
    """The fields of an Azure Storage connection string that the Blob service uses."""

    account_name: str | None = None
    account_key: str | None = None
    sas_token: str | None = None
    blob_endpoint: str | None = None

    def __repr__(self) -> str:  # the key and the SAS are secrets
        return f"ConnectionString(account_name={self.account_name!r}, blob_endpoint={self.blob_endpoint!r})"


def parse_connection_string(text: str) -> ConnectionString:
    """Parse ``Key=Value;...`` (keys case-insensitive): ``AccountName``, ``AccountKey``,
    ``SharedAccessSignature``, ``BlobEndpoint``, ``DefaultEndpointsProtocol``, ``EndpointSuffix``
    and ``UseDevelopmentStorage=true`` (Azurite on ``127.0.0.1:10000``)."""
    fields: dict[str, str] = {}
    for part in text.strip().split(";"):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        if not sep:
            raise ConfigurationError(
                "the Azure connection string has a part without '=' (not shown: it may be a key); "
                "it should read like DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...;"
                "EndpointSuffix=core.windows.net"
            )
        fields[name.strip().lower()] = value.strip()  # values keep their '=' (base64 padding)
    if fields.get("usedevelopmentstorage", "").lower() == "true":
        return ConnectionString(DEV_ACCOUNT, DEV_KEY, None, f"http://127.0.0.1:10000/{DEV_ACCOUNT}")
    account = fields.get("accountname")
    endpoint = fields.get("blobendpoint")
    if endpoint is None and account:
        protocol = fields.get("defaultendpointsprotocol", "https")
        suffix = fields.get("endpointsuffix", "core.windows.net")
        endpoint = f"{protocol}://{account}.blob.{suffix}"
    return ConnectionString(
        account_name=account,
        account_key=fields.get("accountkey"),
        sas_token=fields.get("sharedaccesssignature"),
        blob_endpoint=endpoint.rstrip("/") if endpoint else None,
    )


def container_sas(
    key: SharedKey,
    container: str,
    *,
    permissions: str = "rl",
    expiry: datetime.datetime,
    start: datetime.datetime | None = None,
    version: str = "2021-12-02",
) -> str:
    """A service SAS for ``container`` (``sr=c``) signed with the account key: permissions from
    ``racwdl`` (read, add, create, write, delete, list), valid until ``expiry`` (UTC)."""

    def stamp(when: datetime.datetime | None) -> str:
        if when is None:
            return ""
        if when.tzinfo is not None:
            when = when.astimezone(datetime.timezone.utc)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    fields: Mapping[str, str] = {
        "sv": version,
        "st": stamp(start),
        "se": stamp(expiry),
        "sr": "c",
        "sp": permissions,
    }
    text = "\n".join(
        [
            permissions,
            fields["st"],
            fields["se"],
            f"/blob/{key.account}/{container}",
            "",  # signed identifier
            "",  # IP range
            "",  # protocol
            version,
            "c",
            "",  # snapshot time
            "",  # encryption scope
            "",  # rscc, rscd, rsce, rscl, rsct
            "",
            "",
            "",
            "",
        ]
    )
    query = [(k, v) for k, v in fields.items() if v] + [("sig", key.signature(text))]
    return encode_query(query)


def choose_credential(
    account: str | None,
    anon: bool,
    credential: Any,
    sas_token: str | None,
    account_key: str | None,
    conn: ConnectionString | None,
    explicit: bool,
    env: StoreEnv,
) -> Credential:
    """The credential of an ``AzureSource`` (the order is in :mod:`.azure`'s doc)."""
    key = account_key or (conn.account_key if conn else None)
    if not explicit and conn is None:
        key = env.azure_account_key
    if anon:
        return Anonymous()
    if credential is not None:
        return Bearer(credential)
    sas = sas_token or (conn.sas_token if conn and not key else None)
    if sas:
        return Sas(sas)
    if key:  # without an account name yet, the first abfs://container@account URL names it
        return SharedKey(account or "", key)
    if not explicit and env.azure_sas_token:
        return Sas(env.azure_sas_token)
    return Bearer()
