"""The scheme -> Source registry and the per-process source instances that ``get_source`` shares.

Backends are imported lazily, so ``import shardstream`` never imports an SDK; when an optional
backend's package is missing, the error names the extra to install. Instances are keyed by PID
(sources hold sockets and threads that must not cross ``fork()``), scheme and options.

Storage options apply per scheme: a source declares the options it accepts by its constructor's
keyword arguments (``**kwargs`` accepts any), and each source gets only its own from a shared
``storage_options`` dict, so one dataset can mix local paths, ``s3://`` and ``https://``. An
option that no registered source accepts raises ConfigurationError (a typo is never ignored);
:func:`check_storage_options` also rejects options that none of the schemes in use accepts.
A name without a scheme (``train-000.tar``, ``data/train-000.tar``, ``C:\\data\\x.tar``) is a
local path.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

from ..errors import ConfigurationError, UnsafeOperationError, redact_url
from ..forks import ForkSafeLock
from .base import ObjectInfo, Source, SourceBase, WritableSource, local_path_of, read_bounded, with_defaults

__all__ = [
    "check_pipe",
    "check_storage_options",
    "create_url",
    "forget_sources",
    "get_source",
    "open_url",
    "options_for",
    "read_url",
    "register_source",
    "registered_schemes",
    "scheme_of",
    "source_options",
    "stat_url",
    "unregister_source",
]

# scheme -> ("module:Class", extra to install or None)
_REGISTRY: dict[str, tuple[str, str | None]] = {
    "file": ("shardstream.sources.file:FileSource", None),
    "memory": ("shardstream.sources.memory:MemorySource", None),
    "http": ("shardstream.sources.http:HTTPSource", None),
    "https": ("shardstream.sources.http:HTTPSource", None),
    "s3": ("shardstream.sources.s3:S3Source", "s3"),
    "pipe": ("shardstream.sources.pipe:PipeSource", None),
    # Google Cloud Storage, Azure Blob Storage and the Hugging Face Hub: our HTTP client; the
    # extras bring only the credential libraries (see docs/design.md, "Stores").
    "gs": ("shardstream.sources.gcs:GCSSource", "gcs"),
    "gcs": ("shardstream.sources.gcs:GCSSource", "gcs"),
    "az": ("shardstream.sources.azure:AzureSource", "azure"),
    "abfs": ("shardstream.sources.azure:AzureSource", "azure"),
    "abfss": ("shardstream.sources.azure:AzureSource", "azure"),
    "hf": ("shardstream.sources.hf:HFSource", "hf"),
}
_BUILTIN = dict(_REGISTRY)  # restored by unregister_source
_instances: dict[tuple[int, str, str], Source] = {}
_lock = ForkSafeLock()  # a forked child gets it unlocked even if a parent thread held it
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


def register_source(scheme: str, target: str | type, *, extra: str | None = None) -> None:
    """Register ``target`` (a class or ``"module:Class"``) as the source for ``scheme``."""
    if isinstance(target, type):
        target = f"{target.__module__}:{target.__qualname__}"
    _REGISTRY[scheme] = (target, extra)


def unregister_source(scheme: str) -> None:
    """Undo :func:`register_source` for ``scheme``: a built-in scheme gets its own source back,
    another one is no longer known; this process's instances of it are dropped."""
    if scheme in _BUILTIN:
        _REGISTRY[scheme] = _BUILTIN[scheme]
    else:
        _REGISTRY.pop(scheme, None)
    forget_sources(scheme)


def registered_schemes() -> list[str]:
    """The schemes with a source, in the order they were registered (built-ins first)."""
    return list(_REGISTRY)


def forget_sources(scheme: str | None = None) -> list[Source]:
    """Drop the shared source instances (of ``scheme``, or all), so the next use builds new ones;
    returns them (the caller may close them)."""
    with _lock:
        keys = [k for k in _instances if scheme is None or k[1] == scheme]
        return [_instances.pop(k) for k in keys]


def scheme_of(url: str) -> str:
    """The URL's scheme; plain paths, relative names and Windows drive letters are ``file``."""
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
        # Any other protocol that fsspec knows goes through the fallback source (sources/fallback.py).
        from .fallback import fsspec_protocols, source_class_for

        if scheme in fsspec_protocols():
            return source_class_for(scheme)
        raise ConfigurationError(
            f"no source for URL scheme {scheme!r}; known schemes: {', '.join(sorted(_REGISTRY))}, and "
            "any protocol fsspec knows when it is installed (pip install 'shardstream[fsspec]'). "
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


@functools.cache
def _accepted(cls: type) -> frozenset[str] | None:
    params = inspect.signature(cls).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )


def source_options(scheme: str) -> frozenset[str] | None:
    """Names of the storage options the source of ``scheme`` accepts (``None``: any)."""
    return _accepted(_load(scheme))


def _accepted_anywhere() -> dict[str, frozenset[str] | None]:
    """scheme -> accepted options, for every registered scheme whose module imports."""
    table: dict[str, frozenset[str] | None] = {}
    for scheme in sorted(_REGISTRY):
        try:
            table[scheme] = source_options(scheme)
        except (ImportError, AttributeError):  # an optional backend that is not installed
            continue
    return table


def _describe(table: Mapping[str, frozenset[str] | None]) -> str:
    return "; ".join(
        f"{scheme}: {'any' if names is None else ', '.join(sorted(names)) or '(none)'}"
        for scheme, names in sorted(table.items())
    )


def _check_known(names: Iterable[str]) -> None:
    """Raise ConfigurationError for option names that no registered source accepts."""
    names = sorted(set(names))
    if not names:
        return
    table = _accepted_anywhere()
    if any(accepted is None for accepted in table.values()):
        return
    known = frozenset().union(*(a for a in table.values() if a is not None))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigurationError(
            f"unknown storage option(s) {', '.join(map(repr, unknown))}: no source accepts them. "
            f"Options by scheme: {_describe(table)}. Check the spelling."
        )


def options_for(
    scheme: str, storage_options: Mapping[str, Any] | None, *, checked: bool = False
) -> dict[str, Any]:
    """The part of ``storage_options`` that the source of ``scheme`` accepts.

    Options meant for other schemes are left out; an option that no registered source accepts
    raises ConfigurationError, unless ``checked``: the options were already checked against
    every URL they serve (:class:`~._router.SchemeRouter`), which may include an fsspec
    protocol that takes options no registered source knows (``ftp://``'s ``username``).
    """
    options = dict(storage_options or {})
    accepted = source_options(scheme)
    if accepted is None:
        return options
    if not checked:
        _check_known(name for name in options if name not in accepted)
    return {name: value for name, value in options.items() if name in accepted}


def check_storage_options(storage_options: Mapping[str, Any] | None, urls: Iterable[str]) -> None:
    """Raise ConfigurationError for an option that none of the sources of ``urls`` accepts.

    Call it where the whole URL list is known (a dataset), so that ``anon=True`` given to a
    dataset of local files, or ``endpoint`` for ``endpoint_url``, does not go unnoticed.
    """
    options = dict(storage_options or {})
    if not options:
        return
    schemes = {scheme_of(url) for url in urls}
    table = {scheme: source_options(scheme) for scheme in schemes}
    if any(accepted is None for accepted in table.values()):
        return  # a source that takes any option (fsspec's) is in use
    _check_known(options)
    used = frozenset().union(*(a for a in table.values() if a is not None))
    unused = sorted(set(options) - used)
    if unused:
        raise ConfigurationError(
            f"storage option(s) {', '.join(map(repr, unused))} apply to none of the URLs given "
            f"(schemes in use: {', '.join(sorted(schemes))}; they accept {_describe(table)}). "
            "Remove them, or check that the URLs have the intended scheme (s3://, https://)."
        )


def get_source(
    url_or_scheme: str, storage_options: Mapping[str, Any] | None = None, *, checked: bool = False
) -> Source:
    """The (per-process, shared) source for a URL's scheme and the given options.

    ``url_or_scheme`` is a URL or path, or a bare registered scheme name (``"s3"``). The source
    gets only the options it accepts (see :func:`options_for`, and its ``checked``).
    """
    scheme = url_or_scheme if url_or_scheme in _REGISTRY else scheme_of(url_or_scheme)
    options = options_for(scheme, storage_options, checked=checked)
    # Sources hold sockets and threads that must not cross fork(): key instances by PID. A
    # source that declares ``fork_safe`` (its pools drop the parent's connections in a forked
    # child, and it rebuilds what else it holds on first use) is adopted from the parent
    # instead: a DataLoader worker then skips building it again (for S3, a botocore client:
    # about 0.3 s of CPU per worker and epoch) and keeps what it learned (bucket addresses).
    pid = os.getpid()
    options_key = _options_key(options)
    key = (pid, scheme, options_key)
    with _lock:
        source = _instances.get(key)
        if source is None:
            inherited = [
                s
                for (other, sch, opts), s in _instances.items()
                if other != pid and sch == scheme and opts == options_key and _fork_safe(s)
            ]
            source = inherited[0] if inherited else _load(scheme)(**options)
            _instances[key] = source
    return source


def _fork_safe(source: Source) -> bool:
    """Whether a forked child may use ``source`` (declared by ``SourceBase.fork_safe``)."""
    return isinstance(source, SourceBase) and source.fork_safe


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


def read_url(
    url: str,
    *,
    offset: int = 0,
    length: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> bytes:
    """Bytes ``[offset, offset + length)`` of ``url`` (to its end when ``length`` is ``None``) in
    memory, read through :func:`open_url` (so with its retries and resume) and bounded: by
    ``length``, or to the end by the source's ``max_body`` (``SHARDSTREAM_MAX_BODY``). A body
    past the bound raises ResponseTooLargeError (no more than the bound is ever held). For
    manifests, indexes and sidecars, whose size nothing tells in advance; a local file is read
    whole (its size is its own)."""
    source = get_source(url, storage_options)
    sink = bytearray()
    with open_url(url, offset=offset, length=length, storage_options=storage_options) as stream:
        if local_path_of(stream) is not None:
            return bytes(stream.read())
        if length is not None:
            read_bounded(stream, sink, url, length, expected=True)
        else:
            read_bounded(stream, sink, url, with_defaults(source).body_limit(), expected=False)
    return bytes(sink)


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
