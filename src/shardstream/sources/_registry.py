"""The scheme -> Source registry and the per-process source instances that ``get_source`` shares.

Backends are imported lazily, so ``import shardstream`` never imports an SDK; when an optional
backend's package is missing, the error names the extra to install. Instances are keyed by PID
(sources hold sockets and threads that must not cross ``fork()``), scheme and options.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from collections.abc import Mapping
from typing import Any, BinaryIO

from ..errors import ConfigurationError, UnsafeOperationError, redact_url
from .base import ObjectInfo, Source, WritableSource

__all__ = [
    "check_pipe",
    "create_url",
    "get_source",
    "open_url",
    "register_source",
    "scheme_of",
    "stat_url",
]

# scheme -> ("module:Class", extra to install or None)
_REGISTRY: dict[str, tuple[str, str | None]] = {
    "file": ("shardstream.sources.file:FileSource", None),
    "memory": ("shardstream.sources.memory:MemorySource", None),
    "http": ("shardstream.sources.http:HTTPSource", None),
    "https": ("shardstream.sources.http:HTTPSource", None),
    "s3": ("shardstream.sources.s3:S3Source", "s3"),
    "pipe": ("shardstream.sources.pipe:PipeSource", None),
}
_instances: dict[tuple[int, str, str], Source] = {}
_lock = threading.Lock()
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


def register_source(scheme: str, target: str | type, *, extra: str | None = None) -> None:
    """Register ``target`` (a class or ``"module:Class"``) as the source for ``scheme``."""
    if isinstance(target, type):
        target = f"{target.__module__}:{target.__qualname__}"
    _REGISTRY[scheme] = (target, extra)


def scheme_of(url: str) -> str:
    """The URL's scheme; plain paths (and Windows drive letters) are ``file``."""
    match = _SCHEME.match(url)
    if match is None or len(match.group(1)) == 1:
        return "file"
    return match.group(1).lower()


def _options_key(options: Mapping[str, Any]) -> str:
    # repr of sorted items: distinct credentials/endpoints get distinct sources. The key is never
    # logged (it may hold secrets).
    return repr(sorted(options.items()))


def _load(scheme: str) -> type:
    try:
        target, extra = _REGISTRY[scheme]
    except KeyError:
        raise ConfigurationError(
            f"no source for URL scheme {scheme!r}; known schemes: {', '.join(sorted(_REGISTRY))}. "
            "Register one with shardstream.sources.register_source()."
        ) from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"pip install 'shardstream[{extra}]'" if extra else f"install the module {exc.name!r}"
        raise ImportError(f"reading {scheme}:// URLs needs {exc.name!r}: {hint}") from exc
    cls: type = getattr(module, class_name)
    return cls


def get_source(url_or_scheme: str, storage_options: Mapping[str, Any] | None = None) -> Source:
    """The (per-process, shared) source for a URL's scheme and the given options."""
    scheme = scheme_of(url_or_scheme) if ":" in url_or_scheme or "/" in url_or_scheme else url_or_scheme
    options = dict(storage_options or {})
    # Sources hold sockets and threads that must not cross fork(): key instances by PID.
    key = (os.getpid(), scheme, _options_key(options))
    with _lock:
        source = _instances.get(key)
        if source is None:
            source = _load(scheme)(**options)
            _instances[key] = source
    return source


def check_pipe(url: str, allow_pipe: bool) -> None:
    """Raise UnsafeOperationError for a ``pipe:`` URL unless ``allow_pipe``."""
    if scheme_of(url) == "pipe" and not allow_pipe:
        raise UnsafeOperationError(
            f"refusing to run the shell command in {redact_url(url)}: pipe: URLs run arbitrary "
            "commands, so they are opt-in. Pass allow_pipe=True to this dataset (or writer) if you "
            "trust the URL list."
        )


def open_url(
    url: str,
    *,
    offset: int = 0,
    length: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
) -> BinaryIO:
    """Open bytes ``[offset, offset + length)`` of ``url`` (to the end when ``length`` is ``None``)."""
    check_pipe(url, allow_pipe)
    source = get_source(url, storage_options)
    if length is None:  # sources registered by users may predate ranged reads
        return source.open(url, offset=offset)
    return source.open(url, offset=offset, length=length)


def stat_url(url: str, *, storage_options: Mapping[str, Any] | None = None) -> ObjectInfo:
    """Size and version of ``url``."""
    return get_source(url, storage_options).stat(url)


def create_url(
    url: str, *, storage_options: Mapping[str, Any] | None = None, allow_pipe: bool = False
) -> BinaryIO:
    """Open ``url`` for writing; raises ConfigurationError for read-only schemes."""
    check_pipe(url, allow_pipe)
    source = get_source(url, storage_options)
    if not isinstance(source, WritableSource):
        raise ConfigurationError(
            f"the {scheme_of(url)}:// source cannot write; cannot create {redact_url(url)}"
        )
    return source.create(url)
