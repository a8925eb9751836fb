"""Exceptions raised by shardstream.

Every exception subclasses the matching built-in, so ``except OSError`` or ``except ValueError``
clauses written for WebDataset keep working::

    ShardStreamError
    ├── ShardFormatError (ValueError)        corrupt or truncated tar; names url, member, offset
    ├── DecodingError (ValueError)           a member could not be decoded
    ├── MissingFieldError (KeyError, ValueError)  a sample lacks a field a stage names (to_tuple, rename, ...)
    ├── UnsafeOperationError (PermissionError)  pickle decoding or pipe: used without opting in
    ├── ConfigurationError (ValueError)      bad argument or spec; the message says the fix
    │   ├── SplitError                       fewer shards than ranks x workers, and similar
    │   ├── StateError                       a saved state cannot be restored (mismatch, unsupported stage)
    │   ├── IndexFormatError                 a shard index or offsets sidecar is truncated, corrupt or missing
    │   └── UnsafePathError                  a key, member or URL would become a path outside its directory
    ├── SourceError (OSError)                opening or reading a URL failed
    │   ├── ShardNotFoundError (FileNotFoundError)  404 / missing file / unknown bucket
    │   ├── AccessDeniedError (PermissionError)     401 / 403 / bad credentials
    │   ├── TransientSourceError (ConnectionError)  reset, timeout, 5xx: retried with resume
    │   ├── ObjectChangedError                object replaced mid-read (ETag/size changed, 412)
    │   ├── ResponseTooLargeError            a body larger than expected or than max_body (never allocated)
    │   └── PipeCommandError                 a pipe: command exited with a failing status
    ├── CacheError (OSError)                 the shard cache cannot be used
    │   └── CacheLockTimeout (TimeoutError)  waited too long for another process's download
    └── WorkerLostError (RuntimeError)       a worker process was lost and not replaced (no restarts left)
        ├── WorkerDiedError                  it died: a signal (the OOM killer's SIGKILL) or a failing exit
        └── WorkerStuckError                 it sent no batch in time: names it, its PID, its stack

Messages state the value, the likely cause and the fix. They never contain credentials: URLs
are passed through :func:`redact_url` before they are formatted, and :class:`ShardStreamError`
passes its text through it again, for every subclass.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

__all__ = [
    "AccessDeniedError",
    "CacheError",
    "CacheLockTimeout",
    "ConfigurationError",
    "DecodingError",
    "IndexFormatError",
    "MissingFieldError",
    "ObjectChangedError",
    "PipeCommandError",
    "ResponseTooLargeError",
    "ShardFormatError",
    "ShardNotFoundError",
    "ShardStreamError",
    "SourceError",
    "SplitError",
    "StateError",
    "TransientSourceError",
    "UnsafeOperationError",
    "UnsafePathError",
    "WorkerDiedError",
    "WorkerLostError",
    "WorkerStuckError",
    "redact_url",
]

# user:password@ in any URL's authority (greedy up to the last "@" before the path, so a password
# containing "@" is removed whole).
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<info>[^/?#\s]*)@")
# The same in a percent-encoded URL (a URL inside another one's query: ``?next=https%3A%2F%2Fu%3Ap%40h``),
# at any depth of encoding (``%253A``).
_ENCODED_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*%(?:25)*3[Aa]%(?:25)*2[Ff]%(?:25)*2[Ff])"
    r"(?P<info>(?:(?!%(?:25)*(?:2[Ff]|3[Ff]|23))[^/?#&;\s'\"<>])*)%(?:25)*40"
)
# Azure's abfs[s]:// and wasb[s]:// name the container there (container@account.dfs...): kept
# when it holds no ":" (no password).
_CONTAINER_SCHEMES = frozenset({"abfs://", "abfss://", "wasb://", "wasbs://"})


def _redact_userinfo(match: re.Match[str]) -> str:
    scheme = match.group("scheme")
    if scheme.lower() in _CONTAINER_SCHEMES and ":" not in match.group("info"):
        return match.group(0)
    return f"{scheme}***@"


def _redact_encoded_userinfo(match: re.Match[str]) -> str:
    scheme = match.group("scheme")
    at = match.group(0)[len(scheme) + len(match.group("info")) :]  # the encoded "@", as written
    return f"{scheme}***{at}"


#: Query parameters whose values are secrets (compared case-insensitively, after percent-decoding
#: the name). Signed URLs: AWS SigV4 (``X-Amz-Signature``, ``X-Amz-Credential``,
#: ``X-Amz-Security-Token``) and SigV2 (``AWSAccessKeyId``, ``Signature``); GCS V4
#: (``X-Goog-Signature``, ``X-Goog-Credential``) and V2 (``GoogleAccessId``, ``Signature``);
#: CloudFront (the Hub's CDN: ``Signature``, ``Key-Pair-Id``).
#: The credential parameters name an access key or a service account rather than being one;
#: they are removed all the same, since a key's identity is half of what an attacker needs and
#: is what audit logs are searched by.
#:
#: Azure SAS: ``sig`` is the signature (the secret). By the same rule as ``X-Amz-Credential``,
#: the fields that identify the key or the principal behind a user delegation SAS go too:
#: ``skoid`` and ``sktid`` (the Entra ID object and tenant whose delegation key signed),
#: ``saoid``/``suoid`` (the user it was issued for) and ``sduoid`` (the delegated user). The
#: other fields (``sv``, ``ss``, ``srt``, ``sr``, ``sp``, ``st``, ``se``, ``spr``, ``sip``, ``si``,
#: ``skt``, ``ske``, ``sks``, ``skv``, ...) are versions, permissions, validity times and a
#: stored policy's name: useless without ``sig`` and what a reader needs to see why a SAS was
#: refused (an expired ``se``, a missing ``sp=r``), so they are kept. The ``AccountKey``,
#: ``SharedAccessKey`` and ``SharedAccessSignature`` fields of a connection string (``;``
#: separated, matched like parameters) are secrets too. Then the usual token, key and password
#: names.
_SECRET_PARAMETERS = frozenset(
    {
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "awsaccesskeyid",
        "signature",
        "x-goog-signature",
        "x-goog-credential",
        "googleaccessid",
        "key-pair-id",
        "sig",
        "skoid",
        "sktid",
        "saoid",
        "suoid",
        "sduoid",
        "accountkey",
        "sharedaccesskey",
        "sharedaccesssignature",
        "sas",
        "sas_token",
        "token",
        "access_token",
        "id_token",
        "refresh_token",
        "auth_token",
        "hf_token",
        "session_token",
        "security_token",
        "aws_session_token",
        "key",
        "api_key",
        "apikey",
        "api-key",
        "access_key",
        "access_key_id",
        "aws_access_key_id",
        "account_key",
        "private_key",
        "private_key_id",
        "secret",
        "secret_key",
        "client_secret",
        "aws_secret_access_key",
        "secret_access_key",
        "password",
        "passwd",
        "pwd",
        "auth",
        "authorization",
        "credential",
        "credentials",
    }
)
# A parameter is a name after "?", "&" or ";" up to "="; its value runs to the next separator,
# whitespace, quote or fragment. Names are matched case-insensitively and in percent-encoded form
# too (X%2DAmz%2DSignature).
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.%-]+)=)(?P<value>[^&;#\s'\"<>]*)")
# The same inside a percent-encoded URL (``?next=https%3A%2F%2Fh%2Fk%3Fsig%3DSECRET%26sp%3Dr``):
# "?", "&", ";" and "=" encoded (at any depth), and the value ends at an encoded separator too.
_ENCODED_PARAM = re.compile(
    r"(?P<head>%(?:25)*(?:3[Ff]|26|3[Bb])(?P<name>[A-Za-z0-9_.%-]+?)(?:=|%(?:25)*3[Dd]))"
    r"(?P<value>(?:(?!%(?:25)*(?:26|3[Bb]|23))[^&;#\s'\"<>])*)"
)


#: Fields whose quoted value is a secret where text holds a dict's ``repr`` or JSON (a
#: ``storage_options`` dict, a key file): ``'secret_access_key': '...'``, ``"private_key": "..."``.
#: Narrower than the parameter names: ``key`` names sample keys and ``signature`` hashes there.
#: An access key's id goes for the reason ``X-Amz-Credential`` does.
_SECRET_FIELDS = frozenset(
    {
        "access_key_id",
        "aws_access_key_id",
        "secret",
        "secret_key",
        "secret_access_key",
        "aws_secret_access_key",
        "session_token",
        "aws_session_token",
        "security_token",
        "token",
        "access_token",
        "id_token",
        "refresh_token",
        "hf_token",
        "api_key",
        "apikey",
        "account_key",
        "sas_token",
        "connection_string",
        "client_secret",
        "private_key",
        "private_key_id",
        "password",
        "passwd",
        "authorization",
        "credential",
        "credentials",
    }
)
_QUOTED_FIELD = re.compile(
    r"(?P<head>(?P<q>['\"])(?P<name>[A-Za-z0-9_-]{1,40})(?P=q)\s*:\s*(?P<v>['\"]))"
    r"(?P<value>(?:\\.|(?!(?P=v)).)*)(?P=v)"
)


#: Values of those fields that name a kind of credentials, not a secret (gcsfs's ``token=``
#: keywords), kept so that a message can say ``{'token': 'anon'}``.
_KEYWORD_VALUES = frozenset({"anon", "google_default", "cloud", "browser", "cache", "true", "false", "none"})


def _redact_field(match: re.Match[str]) -> str:
    value = match.group("value")
    if value.lower() in _KEYWORD_VALUES:
        return match.group(0)
    if value and match.group("name").lower() in _SECRET_FIELDS:
        return f"{match.group('head')}***{match.group('v')}"
    return match.group(0)


def _secret_name(name: str) -> bool:
    for _ in range(3):  # X%252DAmz%252DSignature: decoded at most three times
        decoded = unquote(name)
        if decoded == name:
            break
        name = decoded
    return name.lower() in _SECRET_PARAMETERS


def _redact_param(match: re.Match[str]) -> str:
    if match.group("value") and _secret_name(match.group("name")):
        return match.group("head") + "***"
    return match.group(0)


def redact_url(url: object, *, limit: int | None = None) -> str:
    """Return ``url`` as a string with user info and secret query values replaced by ``***``.

    Works on any text (a message holding several URLs, an exception's ``str``, a connection
    string, the ``str`` of a saved state): every ``scheme://user:password@`` loses its user info,
    and the value of every query parameter named in :data:`_SECRET_PARAMETERS` (any case, the
    name percent-encoded or not) becomes ``***``; the same holds inside a percent-encoded URL (one
    passed in another's query). A quoted value of a field named in :data:`_SECRET_FIELDS`, in a
    dict's ``repr`` or in JSON, becomes ``'***'`` too.

    Args:
        url: the text (any object: its ``str``).
        limit: cut the result to this many characters. Cutting comes after redacting, never
            before: a URL cut before its ``@`` or inside a parameter's name would no longer be
            recognised, and half its password would show.
    """
    text = str(url)
    text = _USERINFO.sub(_redact_userinfo, text)
    text = _QUERY_PARAM.sub(_redact_param, text)
    if ":" in text:
        text = _QUOTED_FIELD.sub(_redact_field, text)
    if "%" in text:
        text = _ENCODED_USERINFO.sub(_redact_encoded_userinfo, text)
        text = _ENCODED_PARAM.sub(_redact_param, text)
    return text if limit is None else text[:limit]


class ShardStreamError(Exception):
    """Base class of every shardstream exception.

    Its text arguments pass through :func:`redact_url` here, once for every subclass, so a URL
    that a message formats without redacting it first still loses its secrets (``str()``,
    ``repr()``, ``args``, tracebacks and pickles all read ``args``).
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact_url(a) if isinstance(a, str) else a for a in args))


class ShardFormatError(ShardStreamError, ValueError):
    """A shard is not a valid (or complete) tar stream.

    Attributes:
        url: the shard's URL (credentials removed).
        member: the member being read, or ``None`` when the header itself was unreadable.
        offset: byte offset in the (uncompressed) tar stream where the problem was found.
    """

    def __init__(self, reason: str, *, url: object, member: str | None, offset: int) -> None:
        self.url = redact_url(url)
        self.member = member
        self.offset = offset
        self.reason = reason
        where = f"member {member!r}" if member is not None else "a member header"
        super().__init__(
            f"{reason} in shard {self.url} at {where}, byte offset {offset}. The shard is corrupt "
            "or was cut short (an interrupted download or copy); re-create or re-download it, or "
            "pass handler=warn_and_continue to skip it and go on."
        )


class DecodingError(ShardStreamError, ValueError):
    """A sample member could not be decoded.

    Attributes:
        url, key, extension: where the member came from.
    """

    def __init__(self, message: str, *, url: object = None, key: object = None, extension: str = "") -> None:
        self.url = redact_url(url) if url is not None else None
        self.key = key
        self.extension = extension
        super().__init__(message)


class MissingFieldError(ShardStreamError, KeyError, ValueError):
    """A sample lacks a field that a stage names (``to_tuple("jpg")``, ``rename(x="cls")``,
    ``map_dict(txt=...)``). Both a ``KeyError`` and a ``ValueError`` (what WebDataset raises), so
    ``except`` clauses written for either keep working."""

    def __str__(self) -> str:  # KeyError's __str__ would quote the message
        return str(self.args[0]) if self.args else ""


class UnsafeOperationError(ShardStreamError, PermissionError):
    """An operation that can run arbitrary code was requested without opting in."""


class ConfigurationError(ShardStreamError, ValueError):
    """An argument, URL spec or setting cannot be used as given."""


class SplitError(ConfigurationError):
    """Shards cannot be split over the ranks and workers as requested."""


class StateError(ConfigurationError):
    """A pipeline state cannot be saved or restored: it was taken from a different pipeline
    (shards, seed, batch size, split mode, world size), or a stage cannot report its position."""


class IndexFormatError(ConfigurationError):
    """A shard index (``_info.json``) or an offsets sidecar cannot be read: truncated, corrupt,
    written for other shards, or listed but missing. The message names the file and how to
    rewrite it (``shardstream index``)."""


class UnsafePathError(ConfigurationError):
    """A name from data (a sample key, a tar member, an index entry, a name made from a URL)
    cannot become a file path under its destination directory: it is empty or absolute, has a
    ``..`` or empty component, or holds NUL (see :mod:`shardstream.paths`). Raised before anything
    is written under that name.

    Attributes:
        name: the refused name.
        url: the shard, index or URL it came from (credentials removed), or ``None``.
        reason: why it is refused.
    """

    def __init__(self, what: str, *, name: str, reason: str, url: object = None, fix: str) -> None:
        self.name = name
        self.url = redact_url(url) if url is not None else None
        self.reason = reason
        where = f" in {self.url}" if self.url is not None else ""
        super().__init__(f"{what} {name!r}{where} {reason}. {fix}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle's default calls the class with ``args`` alone, which the keyword-only arguments
        # refuse; rebuilt from its state instead, it can travel from a worker process or Ray task.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class SourceError(ShardStreamError, OSError):
    """Opening or reading a URL failed.

    Attributes:
        url: the URL (credentials removed).
        status: HTTP-like status code when the backend reported one, else ``None``.
    """

    def __init__(self, message: str, *, url: object = None, status: int | None = None) -> None:
        self.url = redact_url(url) if url is not None else None
        self.status = status
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ShardNotFoundError(SourceError, FileNotFoundError):
    """The URL names nothing: missing file, missing key (404) or unknown bucket."""


class AccessDeniedError(SourceError, PermissionError):
    """The server refused access (401/403), usually wrong or missing credentials."""


class TransientSourceError(SourceError, ConnectionError):
    """A fault worth retrying: connection reset, timeout, throttling or a 5xx status."""


class ObjectChangedError(SourceError):
    """The object was replaced while it was being read, so resuming would mix two versions."""


class ResponseTooLargeError(SourceError):
    """A server announced or sent a body larger than the read may take: the size the caller
    expected (a manifest's or a stat's size, a range's length) or, when nothing was known, the
    ``max_body`` bound (``SHARDSTREAM_MAX_BODY``). Raised before the bytes are allocated; not
    retried (the same request would get the same answer).

    Attributes:
        size: the body's size as announced (``Content-Length``), or the bytes received when the
            body had no length (chunked, or ended by the connection's close).
        limit: the most bytes the read would take.
    """

    def __init__(self, message: str, *, url: object = None, size: int, limit: int) -> None:
        super().__init__(message, url=url)
        self.size = size
        self.limit = limit


class PipeCommandError(SourceError):
    """A ``pipe:`` command exited with a failing status after its output was read to the end."""


class CacheError(ShardStreamError, OSError):
    """The shard cache directory cannot be used."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class WorkerLostError(ShardStreamError, RuntimeError):
    """A loader's worker process was lost and not replaced: its restarts were used up
    (``worker_restarts=``, 3 per epoch by default; 0: the first loss ends the epoch), the same
    position lost its worker twice (a sample that kills or stalls every worker that makes it), or
    the dataset cannot say where its workers are (not a shardstream pipeline).

    A ``RuntimeError``, like torch's own "DataLoader worker exited unexpectedly", so existing
    handlers keep working.

    Attributes:
        worker: the worker's index. pid: its process ID.
        restarts: the workers replaced before in this epoch, oldest first: ``{"worker", "pid",
            "cause", "batch"}`` each.
        sample: the sample that was being made when it was lost, found by a diagnostic run
            (``{"url", "offset", "key", "stage"}``, ``offset`` ``None`` when the reader has no byte
            offsets), or ``None`` (no diagnostic run, or it did not lose its process).
    """

    def __init__(
        self,
        message: str,
        *,
        worker: int,
        pid: int | None,
        restarts: list[dict[str, Any]] | None = None,
        sample: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.worker, self.pid = worker, pid
        self.restarts = list(restarts or [])
        if sample is not None and sample.get("url") is not None:
            sample = {**sample, "url": redact_url(sample["url"])}
        self.sample = sample

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.args, self.__dict__))  # keyword-only arguments (see above)


class WorkerDiedError(WorkerLostError):
    """A loader's worker process died (killed by a signal, such as the kernel's OOM killer's
    SIGKILL, or exited with a failing status) and was not replaced (see :class:`WorkerLostError`).

    Attributes:
        signal: the signal's name (``"SIGKILL"``), or ``None`` when it exited. exitcode: its exit
            status (negative: killed by that signal number).
    """

    def __init__(
        self, message: str, *, signal: str | None = None, exitcode: int | None = None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.signal, self.exitcode = signal, exitcode


class WorkerStuckError(WorkerLostError):
    """A loader's worker process sent no batch within the loader's bound.

    A ``RuntimeError``, like torch's own ``DataLoader timed out`` error, so existing handlers keep
    working. The message names the worker, its PID, how it was started, its state and its Python
    stack (dumped by the worker on request), or says that it never ran Python code after the fork.
    In process mode the loader ends a stuck worker and starts its workers again where they were
    (:class:`WorkerLostError` says when it does not); in thread mode (``ss.Loader(num_workers=0)``)
    the stacks are those of the loader's threads, which cannot be killed.

    Attributes:
        worker: the worker's index. pid: its process ID. stack: its Python stack ("" if none).
    """

    def __init__(self, message: str, *, worker: int, pid: int | None, stack: str = "", **kw: Any) -> None:
        super().__init__(message, worker=worker, pid=pid, **kw)
        self.stack = stack


class CacheLockTimeout(CacheError, TimeoutError):
    """Waited longer than the lock timeout for another process to finish a download."""
