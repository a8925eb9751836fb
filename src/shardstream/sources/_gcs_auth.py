"""Credentials of the ``gs://`` source, found as Google's own client libraries (and gcsfs) find them.

Order: an explicit ``token=`` storage option, then ``STORAGE_EMULATOR_HOST`` (an emulator: no
credentials, as Google's clients do), then ``google.auth.default()`` (``GOOGLE_APPLICATION_CREDENTIALS``,
the gcloud application default credentials, the metadata server of a Google Cloud VM).

``token=`` takes what gcsfs's ``token=`` takes, so ``storage_options`` written for gcsfs work here:

- ``"anon"`` (no credentials: public buckets), ``"google_default"`` (application default
  credentials), ``"cloud"`` (the metadata server of a Google Cloud VM);
- a path to a JSON key file (a service account's, or the ``authorized_user`` file that
  ``gcloud auth application-default login`` writes), taken as a path only when the file exists;
- the text of such a key file (a string starting with ``{``: the usual way to hand a key over
  from an environment variable or a secret manager), or the same as a dict;
- a ``google.auth.credentials.Credentials`` object, used as given (scoped when it needs scopes);
- any other string: an OAuth2 access token, sent as is (it cannot be renewed).

gcsfs's interactive ``"browser"`` login and its ``"cache"`` of it are refused with what to do
instead: a data loader cannot open a browser in each worker. Deciding what a string is never
looks at its characters beyond a leading ``{``: a file that exists is a key file, and anything
else is a token (a path-like token that names no file is still sent as a token, but what
messages say about it tells that no such file exists).

``google-auth`` is imported only where it is needed (key files, credentials objects and default
credentials), and its token requests travel on our own HTTP client (:func:`_transport`), so the
``gcs`` extra brings no HTTP library. Tokens are refreshed under a lock before they expire
(``google-auth`` marks a token expired a few minutes early) and once more when the server answers
401. What a message, a log line or a ``repr`` says about credentials is their *kind*
(:attr:`GCSAuth.kind`: "service account reader@...", "credentials file 'key.json'", "JSON key
text", "access token", "Credentials object of type X"), never a token or a key; text that
google-auth or a token endpoint wrote is passed through :func:`_Secrets.mask` before it is shown.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..config import DEFAULT_MAX_BODY
from ..errors import AccessDeniedError, ConfigurationError, TransientSourceError, redact_url
from ..forks import ForkSafeLock
from ..net.pool import ConnectionPool
from ..optional import require

__all__ = ["GCSAuth", "SCOPE", "TokenPlan", "plan_token"]

log = logging.getLogger(__name__)

#: Read and write access to objects (what uploads need; downloads need less).
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
_INSTALL = "pip install 'shardstream[gcs]'"

#: Fields of a key file that identify it without granting anything: shown when useful, never
#: masked. Every other string in a key (private_key, private_key_id, client_secret,
#: refresh_token, ...) is a secret.
_PUBLIC_FIELDS = frozenset(
    {"type", "client_email", "project_id", "quota_project_id", "token_uri", "auth_uri", "universe_domain"}
)
_INTERACTIVE = frozenset({"browser", "cache"})


class _Response:
    """A ``google.auth.transport.Response`` over one of our responses."""

    def __init__(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
        self.status = status
        self.headers = dict(headers)
        self.data = data


def _transport(pool: ConnectionPool) -> Any:
    """A ``google.auth.transport.Request`` that sends google-auth's token requests on ``pool``."""
    transport = require("google.auth.transport", purpose="gs:// credentials", install=_INSTALL)
    exceptions = require("google.auth.exceptions", purpose="gs:// credentials", install=_INSTALL)

    class Transport(transport.Request):  # type: ignore[misc,name-defined]
        def __call__(
            self,
            url: str,
            method: str = "GET",
            body: bytes | None = None,
            headers: Mapping[str, str] | None = None,
            timeout: float | None = None,
            **kwargs: Any,
        ) -> _Response:
            try:
                body_stream = pool.request(method, url, headers=dict(headers or {}), body=body)
                resp = body_stream.response
                data = body_stream.read_all(DEFAULT_MAX_BODY)  # (a token: a few hundred bytes)
                body_stream.finish()
            except Exception as exc:  # google-auth expects TransportError for network faults
                raise exceptions.TransportError(redact_url(f"{type(exc).__name__}: {exc}")) from exc
            return _Response(resp.status, dict(resp.getheaders()), data)

    return Transport()


class _Secrets:
    """The secret strings of one ``token=`` value, for masking text that others wrote (google-auth's
    exceptions, a token endpoint's error answer), which may quote what they were given."""

    _MIN = 6  # shorter strings are not masked: they would hit ordinary words

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        for value in values:
            # a PEM key line by line too (a message may quote one line of it)
            for part in (value, *value.splitlines()):
                part = part.strip()
                if len(part) >= self._MIN:
                    self._values.add(part)

    def add_info(self, info: Mapping[str, Any]) -> None:
        """The secret fields of a key file's contents (every string but the public ones)."""
        self.add(str(v) for k, v in info.items() if k not in _PUBLIC_FIELDS and isinstance(v, (str, int)))

    def mask(self, text: object) -> str:
        """``text`` with every known secret replaced by ``***`` (longest first), and its URLs redacted."""
        out = str(text)
        for value in sorted(self._values, key=len, reverse=True):
            out = out.replace(value, "***")
        return redact_url(out)


class TokenPlan:
    """What a ``token=`` value is, decided without google-auth and without reading a key file.

    Attributes:
        form: ``"anonymous"``, ``"default"`` (application default credentials), ``"metadata"``
            (the metadata server), ``"file"`` (a key file's path), ``"info"`` (a key file's
            contents, from a dict or JSON text), ``"credentials"`` (a google-auth object) or
            ``"access_token"``.
        kind: what messages, log lines and ``repr`` say about the credentials (never the value).
        note: why a path-like string was taken as an access token ("" otherwise).
    """

    __slots__ = ("form", "kind", "note", "value")

    def __init__(self, form: str, kind: str, value: Any = None, note: str = "") -> None:
        self.form, self.kind, self.value, self.note = form, kind, value, note

    def __repr__(self) -> str:  # never the value
        return f"TokenPlan(form={self.form!r}, kind={self.kind!r})"


def plan_token(token: object, *, emulator: bool = False) -> TokenPlan:
    """Classify a ``token=`` storage option (see the module doc) as gcsfs does.

    Args:
        token: the option's value, or ``None`` when it is not given.
        emulator: whether ``STORAGE_EMULATOR_HOST`` names the endpoint (then no token means none).

    Raises:
        ConfigurationError: JSON key text that does not parse, a directory, gcsfs's interactive
            ``"browser"``/``"cache"``, or a value of another type. The message never quotes the
            value (at most the base name of a path).
    """
    if token is None:
        return (
            TokenPlan("anonymous", "anonymous")
            if emulator
            else TokenPlan("default", "application default credentials")
        )
    if isinstance(token, Mapping):
        return TokenPlan("info", "credentials dict", dict(token))
    if isinstance(token, str):
        return _plan_string(token)
    credentials = require("google.auth.credentials", purpose="gs:// credentials objects", install=_INSTALL)
    if isinstance(token, credentials.Credentials):
        return TokenPlan("credentials", f"Credentials object of type {type(token).__name__}", token)
    raise ConfigurationError(
        f"token= of type {type(token).__name__} is not understood for gs://. Pass a key file path, "
        "the key file's JSON text or a dict of it, a google.auth Credentials object, an OAuth2 "
        "access token, 'anon' (public buckets) or 'google_default'"
    )


def _plan_string(token: str) -> TokenPlan:
    if token == "anon":
        return TokenPlan("anonymous", "anonymous")
    if token == "google_default":
        return TokenPlan("default", "application default credentials")
    if token == "cloud":
        return TokenPlan("metadata", "metadata server credentials")
    if token in _INTERACTIVE:
        raise ConfigurationError(
            f"token={token!r} (gcsfs's interactive browser login) is not supported for gs://: a "
            "data loader cannot open a browser in each worker. Run `gcloud auth "
            "application-default login` once and pass token='google_default' (or leave token= unset)"
        )
    if token.lstrip().startswith("{"):
        try:
            info = json.loads(token)
        except ValueError as exc:
            where = (
                f" (line {exc.lineno}, column {exc.colno}: {exc.msg})"
                if isinstance(exc, json.JSONDecodeError)
                else ""
            )
            raise ConfigurationError(
                f"token= starts with '{{' but is not valid JSON{where}; pass the whole text of a "
                "service account key file (JSON), its path, or a dict"
            ) from None
        return TokenPlan("info", "JSON key text", info)  # (text that starts with "{" is an object)
    path = os.path.expanduser(token)
    if os.path.isfile(path):
        return TokenPlan("file", f"credentials file {os.path.basename(path)!r}", path)
    if os.path.isdir(path):
        raise ConfigurationError(
            f"token= names a directory ({os.path.basename(path.rstrip(os.sep))!r}), not a key file; "
            "pass the path of the JSON key file itself"
        )
    return TokenPlan("access_token", "access token", token, _path_note(token))


def _path_note(token: str) -> str:
    """Why a token that is no file looks like a path, naming no more of it than a file name."""
    if token.lower().endswith(".json"):
        name = re.split(r"[\\/]", token)[-1]
        return f"token= looks like the path of a key file, but no file {name!r} exists there"
    if "/" in token or os.sep in token or token.startswith("~"):
        # (the part after the separator could be half a token: not quoted)
        return "token= contains a path separator, but no such file exists"
    return ""


class GCSAuth:
    """The credentials of one ``GCSSource``: resolved on first use, refreshed before expiry.

    Args:
        token: the ``token=`` storage option (see the module doc), or ``None``.
        emulator: whether ``STORAGE_EMULATOR_HOST`` names the endpoint (then no credentials).
        project: the quota project, for default credentials and key files (default: theirs).
        pool: the connection pool google-auth's token requests use.
    """

    def __init__(self, *, token: object, emulator: bool, project: str | None, pool: ConnectionPool) -> None:
        self._plan = plan_token(token, emulator=emulator)
        self._project = project
        self._pool = pool
        self._lock = ForkSafeLock()
        self._resolved = False
        self._credentials: Any = None  # a google.auth Credentials object, when one refreshes
        self._static: str | None = None  # an access token given as is
        self._secrets = _Secrets()
        if self._plan.form == "access_token":
            self._secrets.add([self._plan.value])
        elif self._plan.form == "info":
            self._secrets.add_info(self._plan.value)
        note = self._plan.note
        self.kind = f"{self._plan.kind} ({note})" if note else self._plan.kind

    def __repr__(self) -> str:
        return f"GCSAuth(kind={self.kind!r})"

    @property
    def anonymous(self) -> bool:
        """Whether requests go without an ``Authorization`` header."""
        return self._plan.form == "anonymous"

    # -- resolving --------------------------------------------------------------------------------

    def resolve(self) -> None:
        """Find the credentials now (the first request does it otherwise). Raises ImportError
        when google-auth is needed and missing, ConfigurationError for an unusable key, and
        AccessDeniedError when no default credentials exist. A failure is not remembered: the
        next call looks again (credentials set up meanwhile are found)."""
        if self._resolved:
            return
        with self._lock:
            if self._resolved:
                return
            plan = self._plan
            if plan.form == "access_token":
                if plan.note:
                    log.warning("gs:// token= is sent as an OAuth2 access token: %s", plan.note)
                self._static = plan.value
            elif plan.form == "file":
                self._credentials = self._from_info(self._read_file(plan.value), plan.kind)
            elif plan.form == "info":
                self._credentials = self._from_info(plan.value, plan.kind)
            elif plan.form == "credentials":
                auth = require("google.auth.credentials", purpose="gs:// credentials", install=_INSTALL)
                self._credentials = auth.with_scopes_if_required(plan.value, [SCOPE])
            elif plan.form == "metadata":
                engine = require("google.auth.compute_engine", purpose="gs:// credentials", install=_INSTALL)
                self._credentials = engine.Credentials(scopes=[SCOPE])
            elif plan.form == "default":
                self._credentials = self._default()
            self._resolved = True

    def _read_file(self, path: str) -> dict[str, Any]:
        """The contents of a key file (its secrets are masked from here on)."""
        name = os.path.basename(path)
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
            info = json.loads(text)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the gs:// credentials file {name!r}: {exc.strerror or type(exc).__name__}. "
                "Check its permissions"
            ) from None
        except ValueError:
            raise ConfigurationError(
                f"the gs:// credentials file {name!r} is not JSON. Pass a service account key "
                "(JSON) or the file `gcloud auth application-default login` writes"
            ) from None
        if not isinstance(info, dict):
            raise ConfigurationError(f"the gs:// credentials file {name!r} holds no JSON object")
        self._secrets.add_info(info)
        return info

    def _from_info(self, info: Mapping[str, Any], where: str) -> Any:
        """A service account key or an ``authorized_user`` key (what ``gcloud auth
        application-default login`` writes), loaded by its type's own loader. A dict without
        ``type`` is taken by its fields, as gcsfs does (old gcsfs token dicts have none)."""
        require("google.auth", purpose="gs:// credentials from a key", install=_INSTALL)
        kind = info.get("type")
        if kind is None and "private_key" in info and "client_email" in info:
            kind = "service_account"
        elif kind is None and "refresh_token" in info:
            kind = "authorized_user"
        try:
            if kind == "service_account":
                module = require("google.oauth2.service_account", purpose="gs:// keys", install=_INSTALL)
                credentials = module.Credentials.from_service_account_info(info, scopes=[SCOPE])
                self.kind = f"service account {credentials.service_account_email}"
            elif kind == "authorized_user":
                module = require("google.oauth2.credentials", purpose="gs:// keys", install=_INSTALL)
                credentials = module.Credentials.from_authorized_user_info(info, scopes=[SCOPE])
            else:
                shown = (
                    repr(kind)
                    if isinstance(kind, str) and re.fullmatch(r"[a-z_]{1,40}", kind)
                    else "missing or unknown"
                )
                raise ValueError(
                    f"its type is {shown}; token= takes 'service_account' and 'authorized_user' "
                    "keys (for others, set GOOGLE_APPLICATION_CREDENTIALS and leave token= unset)"
                )
        except ValueError as exc:  # (google-auth's MalformedError is a ValueError too)
            raise ConfigurationError(
                f"cannot load the gs:// {where}: {self._secrets.mask(exc).rstrip('.')}. Download a new "
                "service account key (JSON) or run `gcloud auth application-default login`"
            ) from None
        auth = require("google.auth.credentials", purpose="gs:// credentials", install=_INSTALL)
        if self._project and isinstance(credentials, auth.CredentialsWithQuotaProject):
            credentials = credentials.with_quota_project(self._project)
        return credentials

    def _default(self) -> Any:
        auth = require("google.auth", purpose="gs:// default credentials", install=_INSTALL)
        exceptions = require("google.auth.exceptions", purpose="gs:// credentials", install=_INSTALL)
        try:
            credentials, _ = auth.default(scopes=[SCOPE], quota_project_id=self._project)
        except exceptions.DefaultCredentialsError as exc:
            raise AccessDeniedError(
                f"no Google Cloud credentials were found for gs:// ({redact_url(exc)}). Pass "
                "storage_options={'token': KEY} with KEY the path of a service account key file or "
                "its JSON text (on the command line: --storage-option token=/path/to/key.json), or "
                "{'token': 'anon'} for a public bucket, set GOOGLE_APPLICATION_CREDENTIALS to a key file "
                "(STORAGE_EMULATOR_HOST for an emulator), or run `gcloud auth application-default login`"
            ) from None
        service_account = require("google.oauth2.service_account", purpose="gs:// keys", install=_INSTALL)
        if isinstance(credentials, service_account.Credentials):
            self.kind = (
                f"application default credentials (service account {credentials.service_account_email})"
            )
        return credentials

    # -- tokens -----------------------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header of a request (none when anonymous); refreshes an
        expired or soon expiring token first."""
        self.resolve()
        if self._static is not None:
            return {"Authorization": f"Bearer {self._static}"}
        credentials = self._credentials
        if credentials is None:
            return {}
        if not credentials.valid:
            with self._lock:
                if not credentials.valid:  # (another thread may have refreshed meanwhile)
                    self._refresh(credentials)
        return {"Authorization": f"Bearer {credentials.token}"}

    @property
    def renewable(self) -> bool:
        """Whether a refused token can be renewed (credentials that refresh, not a fixed token)."""
        return self._credentials is not None

    def refresh_after_401(self, sent: Mapping[str, str]) -> bool:
        """After a 401 to a request sent with headers ``sent``: get a new token (unless another
        thread already did). Returns whether a retry may succeed (an access token given as is, or
        no credentials, cannot be renewed)."""
        credentials = self._credentials
        if credentials is None:
            return False
        with self._lock:
            if sent.get("Authorization") == f"Bearer {credentials.token}":
                self._refresh(credentials)
        return True

    def _refresh(self, credentials: Any) -> None:
        exceptions = require("google.auth.exceptions", purpose="gs:// credentials", install=_INSTALL)
        try:
            credentials.refresh(_transport(self._pool))
        except exceptions.RefreshError as exc:
            raise AccessDeniedError(
                f"the {self.kind} could not get an access token for gs:// ({self._secrets.mask(exc)}). Check "
                "that the key or login is still valid (`gcloud auth application-default login`, or a "
                "new service account key)"
            ) from None
        except exceptions.TransportError as exc:
            raise TransientSourceError(
                f"the token request of the {self.kind} failed ({self._secrets.mask(exc)}); it is retried. "
                "Check that the token endpoint (oauth2.googleapis.com, or the metadata server) is "
                "reachable"
            ) from None
