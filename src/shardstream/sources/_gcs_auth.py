"""Credentials of the ``gs://`` source, found as Google's own client libraries find them.

Order: an explicit ``token=`` storage option (``"anon"``: no credentials, for public buckets;
``"google_default"``: application default credentials; a path to a JSON key file, a service
account's or any other that ``google-auth`` loads; any other string: an OAuth2 access token used
as is), then ``STORAGE_EMULATOR_HOST`` (an emulator: no credentials, as Google's clients do),
then ``google.auth.default()`` (``GOOGLE_APPLICATION_CREDENTIALS``, the gcloud application
default credentials, the metadata server of a Google Cloud VM).

``google-auth`` is imported only where it is needed (key files and default credentials), and its
token requests travel on our own HTTP client (:class:`_Transport`), so the ``gcs`` extra brings
no HTTP library. Tokens are refreshed under a lock before they expire (``google-auth`` marks a
token expired a few minutes early) and once more when the server answers 401. What a message,
a log line or a ``repr`` says about credentials is their *kind* (:attr:`GCSAuth.kind`), never a
token or a key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..errors import AccessDeniedError, ConfigurationError, TransientSourceError, redact_url
from ..forks import ForkSafeLock
from ..net.pool import ConnectionPool
from ..optional import require

__all__ = ["GCSAuth", "SCOPE"]

#: Read and write access to objects (what uploads need; downloads need less).
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
_INSTALL = "pip install 'shardstream[gcs]'"


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
                data = resp.read()
                body_stream.finish()
            except Exception as exc:  # google-auth expects TransportError for network faults
                raise exceptions.TransportError(redact_url(f"{type(exc).__name__}: {exc}")) from exc
            return _Response(resp.status, dict(resp.getheaders()), data)

    return Transport()


class GCSAuth:
    """The credentials of one ``GCSSource``: resolved on first use, refreshed before expiry.

    Args:
        token: the ``token=`` storage option (see the module doc), or ``None``.
        emulator: whether ``STORAGE_EMULATOR_HOST`` names the endpoint (then no credentials).
        project: the quota project, for default credentials (default: theirs).
        pool: the connection pool google-auth's token requests use.
    """

    def __init__(
        self, *, token: str | None, emulator: bool, project: str | None, pool: ConnectionPool
    ) -> None:
        self._token = token
        self._emulator = emulator
        self._project = project
        self._pool = pool
        self._lock = ForkSafeLock()
        self._resolved = False
        self._credentials: Any = None  # a google.auth Credentials object, when one refreshes
        self._static: str | None = None  # an access token given as is
        self.kind = self._planned_kind()

    def __repr__(self) -> str:
        return f"GCSAuth(kind={self.kind!r})"

    def _planned_kind(self) -> str:
        token = self._token
        if token == "anon" or (token is None and self._emulator):
            return "anonymous"
        if token is None or token == "google_default":
            return "application default credentials"
        if _looks_like_path(token):
            return f"credentials file {os.path.basename(token)!r}"
        return "access token"

    @property
    def anonymous(self) -> bool:
        """Whether requests go without an ``Authorization`` header."""
        return self.kind == "anonymous"

    # -- resolving --------------------------------------------------------------------------------

    def resolve(self) -> None:
        """Find the credentials now (the first request does it otherwise). Raises ImportError
        when google-auth is needed and missing, ConfigurationError for an unusable key file, and
        AccessDeniedError when no default credentials exist. A failure is not remembered: the
        next call looks again (credentials set up meanwhile are found)."""
        if self._resolved:
            return
        with self._lock:
            if self._resolved:
                return
            token = self._token
            if self.anonymous:
                pass
            elif token is not None and token != "google_default" and not _looks_like_path(token):
                self._static = token
            elif token is not None and token != "google_default":
                self._credentials = self._from_file(token)
            else:
                self._credentials = self._default()
            self._resolved = True

    def _from_file(self, path: str) -> Any:
        """A service account key or an ``authorized_user`` file (what ``gcloud auth
        application-default login`` writes), loaded by its type's own loader."""
        require("google.auth", purpose="gs:// credentials from a key file", install=_INSTALL)
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as file:
                info = json.load(file)
            kind = info.get("type") if isinstance(info, dict) else None
        except FileNotFoundError:
            raise ConfigurationError(
                f"token={path!r} looks like a key file path, but no file is there. Pass the path of "
                "a service account JSON key, 'anon' for public buckets, or an OAuth2 access token"
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read the gs:// credentials file {path!r}: {exc}") from None
        try:
            if kind == "service_account":
                module = require("google.oauth2.service_account", purpose="gs:// keys", install=_INSTALL)
                credentials = module.Credentials.from_service_account_info(info, scopes=[SCOPE])
                self.kind = f"service account {credentials.service_account_email}"
            elif kind == "authorized_user":
                module = require("google.oauth2.credentials", purpose="gs:// keys", install=_INSTALL)
                credentials = module.Credentials.from_authorized_user_info(info, scopes=[SCOPE])
            else:
                raise ValueError(
                    f"its type is {kind!r}; token= takes 'service_account' and 'authorized_user' "
                    "files (for others, set GOOGLE_APPLICATION_CREDENTIALS and leave token= unset)"
                )
        except ValueError as exc:
            raise ConfigurationError(
                f"cannot load the gs:// credentials file {path!r}: {redact_url(exc)}. Download a new "
                "service account key (JSON) or run `gcloud auth application-default login`"
            ) from None
        if self._project and hasattr(credentials, "with_quota_project"):
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
                "storage_options={'token': '/path/to/key.json'} (a service account key; on the command "
                "line: --storage-option token=/path/to/key.json) or {'token': 'anon'} for a public "
                "bucket, set GOOGLE_APPLICATION_CREDENTIALS to a key file (STORAGE_EMULATOR_HOST for an "
                "emulator), or run `gcloud auth application-default login`"
            ) from None
        email = getattr(credentials, "service_account_email", None)
        if isinstance(email, str) and email and email != "default":
            self.kind = f"application default credentials (service account {email})"
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
                f"the {self.kind} could not get an access token for gs:// ({redact_url(exc)}). Check "
                "that the key or login is still valid (`gcloud auth application-default login`, or a "
                "new service account key)"
            ) from None
        except exceptions.TransportError as exc:
            raise TransientSourceError(
                f"the token request of the {self.kind} failed ({redact_url(exc)}); it is retried. "
                "Check that the token endpoint (oauth2.googleapis.com, or the metadata server) is "
                "reachable"
            ) from None


def _looks_like_path(token: str) -> bool:
    """Whether a ``token=`` value names a file rather than being an access token."""
    return os.path.isfile(token) or token.endswith(".json") or os.sep in token or token.startswith("~")
