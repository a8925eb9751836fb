"""Addressing and signing ``s3://`` requests: botocore for configuration, our SigV4 for each request.

botocore does what must match the AWS tools exactly: the credential chain (environment, config
and credentials files, profiles, SSO, instance roles), ``AWS_ENDPOINT_URL``, regions, and how a
bucket is addressed (path or virtual style, region endpoints), which is learned from one
presigned URL per bucket. Each request is then signed here (:class:`~._sigv4.SigV4Signer`, a few
microseconds with the derived key cached) instead of presigning every request through botocore.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, cast
from urllib.parse import urlsplit

from ..errors import ConfigurationError, SourceError, redact_url
from ..forks import ForkSafeLock
from ..net.idle import Key as Address
from ._retry import RetryPolicy
from ._s3_errors import cause
from ._s3_errors import translate as _translate
from ._sigv4 import Credentials, SigV4Signer, uri_encode

__all__ = ["S3Addressing", "parse_s3_url"]


def parse_s3_url(url: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key``; raises ConfigurationError for anything else.

    Everything after the bucket's ``/`` is the key, byte for byte: an S3 URL has no query string
    or fragment, so ``?``, ``#``, ``%``, spaces and non-ASCII characters are part of the key (as
    the AWS CLI and boto3 take them); the key is percent-encoded only on the wire
    (:func:`~._sigv4.uri_encode`).
    """
    if url[:5].lower() == "s3://":
        bucket, _, key = url[5:].partition("/")
        key = key.lstrip("/")
        if bucket and key and "@" not in bucket and ":" not in bucket:
            return bucket, key
    raise ConfigurationError(
        f"{redact_url(url)!r} is not an S3 object URL; expected s3://bucket/path/to/shard.tar"
    )


def _load_botocore() -> Any:
    try:
        import botocore.session
    except ImportError as exc:
        raise ImportError("reading s3:// URLs needs botocore: pip install 'shardstream[s3]'") from exc
    return botocore


class S3Addressing:
    """The botocore client, the credentials and the signing of an :class:`~.s3.S3Source` (a base
    class of it: the attributes below are set by its constructor)."""

    anon: bool
    profile: str | None
    policy: RetryPolicy
    endpoint_url: str
    region: str | None
    _client: Any
    _client_pid: int
    _client_lock: ForkSafeLock
    _client_args: dict[str, Any]
    _timeouts: tuple[float, float]
    _addressing: str
    _session: Any
    _signer: SigV4Signer
    _bases: dict[str, tuple[Address, str, str]]
    requests: Counter[str]
    _count_lock: ForkSafeLock

    def translate(self, exc: BaseException, url: str, action: str = "open") -> SourceError:
        """Map a botocore, socket or ``http.client`` exception to a shardstream error."""
        return _translate(exc, url, action, endpoint=self.endpoint_url)

    def _count(self, url: str) -> None:
        """One more GET of ``url`` in ``requests``."""
        with self._count_lock:
            self.requests[url] += 1

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
        for it (none with ``anon=True``). Cheap: the day's signing key is cached (see :mod:`._sigv4`)."""
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
            raise self.translate(exc, url) from cause(exc)

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
            raise self.translate(exc, shown or url) from cause(exc)
        return signed

    def get_request(self, url: str, offset: int = 0, length: int | None = None) -> tuple[Address, bytes]:
        """``(address, request bytes)`` of one signed GET of ``url``: the whole object, or bytes
        ``[offset, offset + length)`` with a ``Range`` header (to the end when ``length`` is
        ``None``), for the source's own clients that send it themselves (``get_into`` and the
        ``get_many`` session on :mod:`shardstream.net`); counted in ``requests``.

        ``Range`` travels unsigned, as SigV4 allows for any header outside ``SignedHeaders``
        (:mod:`._sigv4`): the signature is the whole object's GET, so signing costs the same."""
        self._count(url)
        bucket, key = parse_s3_url(url)
        try:
            address, host, prefix = self._base(bucket, url)
            path = prefix + uri_encode(key)
            lines = f"Host: {host}\r\n" if self.anon else self._signer.header_lines("GET", host, path)
        except SourceError:
            raise
        except Exception as exc:
            raise self.translate(exc, url) from cause(exc)
        if offset or length is not None:  # (an empty range asks for one byte, cut by the caller)
            last = offset if length is None or length < 1 else offset + length - 1
            lines += f"Range: bytes={offset}-{'' if length is None else last}\r\n"
        # one f-string: the request is the same shape for every object
        return address, f"GET {path} HTTP/1.1\r\n{lines}Accept-Encoding: identity\r\n\r\n".encode("latin-1")


def _is_no_credentials(exc: BaseException) -> bool:
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    return isinstance(exc, NoCredentialsError | PartialCredentialsError)


def _is_aws(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    return host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn")
