"""A Source for every URL: dispatches by scheme to the per-process instances of ``get_source``.

A :class:`SchemeRouter` holds only its options, never a source instance: each call looks the
instance up by PID, scheme and options, so a copy pickled into a DataLoader worker (or inherited
across ``fork()``) builds its own connections there instead of sharing sockets with the parent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

from ..errors import ConfigurationError, redact_url
from ._ahead import PendingOpen
from ._registry import _check_known, check_pipe, check_storage_options, get_source, scheme_of
from .base import ObjectInfo, Source, SourceBase, WritableSource, with_defaults

__all__ = ["SchemeRouter"]

#: Schemes whose ``open`` waits for a server's answer: worth opening before their turn.


class SchemeRouter(SourceBase):
    """Opens any registered URL scheme through the shared per-process sources.

    Args:
        storage_options: options for the sources (endpoint, credentials, retries, ...); each
            scheme's source gets the options it accepts, so one dict can serve ``s3://``,
            ``https://`` and local paths together. An option no source accepts raises
            ConfigurationError here. Never shown in reprs.
        allow_pipe: allow ``pipe:`` URLs, which run shell commands (default False: they raise
            UnsafeOperationError).
        urls: the URLs this router will open, when known: an option that none of their schemes
            accepts then raises ConfigurationError too (see ``check_storage_options``).
    """

    def __init__(
        self,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
        *,
        urls: Iterable[str] | None = None,
    ) -> None:
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        self.allow_pipe = allow_pipe
        # The options are checked here, once (against the URLs' schemes when they are known),
        # so each source then takes its own share without a check of its own: one dataset may
        # mix local paths with an fsspec protocol whose options no registered source knows.
        if urls is not None:
            check_storage_options(self.storage_options, urls)
        else:
            _check_known(self.storage_options)  # an option that no source accepts is an error

    def __repr__(self) -> str:  # option values may be secrets: show names only
        return f"SchemeRouter(storage_options={sorted(self.storage_options)}, allow_pipe={self.allow_pipe})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SchemeRouter):
            return NotImplemented
        return (self.storage_options, self.allow_pipe) == (other.storage_options, other.allow_pipe)

    __hash__ = None  # type: ignore[assignment]  # mutable options: not hashable

    def source_for(self, url: str) -> Source:
        """This process's source for ``url``'s scheme (refuses ``pipe:`` unless allowed)."""
        check_pipe(url, self.allow_pipe)
        return get_source(url, self.storage_options, checked=True)

    def route(self, url: str) -> SourceBase:
        """This process's source for ``url``'s scheme, with the optional capabilities (its own
        ``get_many``: S3's ``epoll`` loop for ``s3://``)."""
        return with_defaults(self.source_for(url))

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``url`` (to the end when ``length`` is ``None``)."""
        source = self.source_for(url)
        if length is None:  # sources registered by users may predate ranged reads
            return source.open(url, offset=offset)
        return source.open(url, offset=offset, length=length)

    def open_ahead(self, url: str, *, offset: int = 0, length: int | None = None) -> PendingOpen | None:
        """Start opening ``url`` in a thread now (see :mod:`._ahead`) where its scheme's source
        ``opens_ahead`` (an open that waits for a round trip: ``s3://``, ``gs://``, ``az://``,
        ``hf://``, ``http(s)://``); ``None`` for the others (a local file opens in microseconds; a
        ``pipe:`` command is started only when read)."""
        return self.route(url).open_ahead(url, offset=offset, length=length)

    def stat(self, url: str) -> ObjectInfo:
        """Size and version of ``url``."""
        return self.source_for(url).stat(url)

    def create(self, url: str) -> BinaryIO:
        """Open ``url`` for writing; raises ConfigurationError for read-only schemes."""
        source = self.source_for(url)
        if not isinstance(source, WritableSource):
            raise ConfigurationError(
                f"the {scheme_of(url)}:// source cannot write; cannot create {redact_url(url)}"
            )
        return source.create(url)

    def close(self) -> None:
        """Nothing to release: the per-process sources are shared by every router and ``open_url``."""
