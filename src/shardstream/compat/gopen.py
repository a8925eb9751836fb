"""WebDataset-compatible ``gopen``: open a URL through the sources registry, and ``gopen_schemes``.

``gopen_schemes`` is WebDataset's scheme -> opener table as a live view of the sources registry:
reading an entry gives an opener function ``(url, mode="rb", bufsize=8192, **kw)``, and assigning
one (``gopen_schemes["myfs"] = my_opener``) makes every reader in the process (datasets,
``gopen``, the cache) open that scheme's URLs with it, as in WebDataset. Such URLs are read as
streams from their start (a resume skips the bytes before its offset).

WebDataset's module also binds what it imports (``PIPE``, ``Popen``, ``urlparse``,
``url2pathname`` and the ``utils`` module); so does this one, for code that reaches them through
it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from subprocess import PIPE as PIPE
from subprocess import Popen as Popen
from typing import Any, BinaryIO
from urllib.parse import urlparse as urlparse
from urllib.request import url2pathname as url2pathname

from ..config import gopen_rewrite, read_settings
from ..errors import ConfigurationError, redact_url
from ..sources import (
    create_url,
    forget_sources,
    limit,
    open_url,
    register_source,
    registered_schemes,
    scheme_of,
    unregister_source,
)
from ..sources.base import ObjectInfo
from . import utils as utils
from ._omitted import omitted
from ._security import refuse_if_enforced

__all__ = [
    "Pipe",
    "gopen",
    "gopen_ais",
    "gopen_curl",
    "gopen_error",
    "gopen_file",
    "gopen_gsutil",
    "gopen_hf",
    "gopen_htgs",
    "gopen_pipe",
    "gopen_schemes",
    "info",
    "reader",
    "rewrite_url",
    "set_options",
]

#: WebDataset's (unused) table of information about the last open.
info: dict[str, Any] = {}

#: An opener as WebDataset calls it: ``opener(url, mode, bufsize, **kw) -> stream``.
Opener = Callable[..., BinaryIO]

_OPENERS: dict[str, Opener] = {}
_TARGET = f"{__name__}:OpenerSource"


def _allow_pipe(explicit: bool) -> bool:
    return explicit or read_settings().allow_pipe


def gopen_error(url: str, *args: Any, **kw: Any) -> BinaryIO:
    """WebDataset's ``__default__`` opener: a URL scheme without an opener raises."""
    raise ValueError(f"{redact_url(url)}: no gopen handler defined")


class OpenerSource:
    """A Source reading the schemes whose opener functions were assigned to ``gopen_schemes``.

    The opener is looked up at every open, so reassigning a scheme takes effect at once.
    """

    def __init__(self, **options: Any) -> None:
        self.options = options

    def _opener(self, url: str) -> Opener:
        try:
            return _OPENERS[scheme_of(url)]
        except KeyError:
            raise ConfigurationError(f"no opener assigned to gopen_schemes[{scheme_of(url)!r}]") from None

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        stream = self._opener(url)(url, "rb", 8192)
        skip = offset
        while skip > 0:  # the opener streams from the start: drop the bytes before the range
            chunk = stream.read(min(skip, 1 << 20))
            if not chunk:
                break
            skip -= len(chunk)
        return limit(stream, length)

    def stat(self, url: str) -> ObjectInfo:
        return ObjectInfo(size=None)

    def create(self, url: str) -> BinaryIO:
        return self._opener(url)(url, "wb", 8192)

    def close(self) -> None:
        """Nothing to release: the opener functions own their streams."""


class _RegistryOpener:
    """The opener function WebDataset code reads from ``gopen_schemes[scheme]`` for a built-in scheme."""

    def __init__(self, scheme: str) -> None:
        self.scheme = scheme

    def __call__(self, url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> BinaryIO:
        return gopen(url, mode, bufsize, **kw)

    def __repr__(self) -> str:
        return f"<shardstream opener for {self.scheme}:>"


class _Schemes(MutableMapping[str, Opener]):
    """Scheme -> opener, backed by the sources registry (see the module docstring)."""

    def __getitem__(self, scheme: str) -> Opener:
        if scheme in _OPENERS:
            return _OPENERS[scheme]
        if scheme == "__default__":
            return gopen_error
        if scheme in registered_schemes():
            return _RegistryOpener(scheme)
        raise KeyError(scheme)

    def __setitem__(self, scheme: str, opener: Opener) -> None:
        if not callable(opener):
            raise TypeError(f"gopen_schemes[{scheme!r}] must be an opener function (url, mode, bufsize)")
        if scheme == "__default__":
            raise ConfigurationError(
                "gopen_schemes['__default__'] cannot be replaced: URLs with a scheme nobody registered "
                "raise; assign an opener to each scheme you need"
            )
        _OPENERS[scheme] = opener
        register_source(scheme, _TARGET)
        forget_sources(scheme)  # the next open uses the new entry

    def __delitem__(self, scheme: str) -> None:
        if scheme not in _OPENERS:
            raise KeyError(scheme)
        del _OPENERS[scheme]
        unregister_source(scheme)  # a built-in scheme gets its own source back

    def __iter__(self) -> Iterator[str]:
        return iter(["__default__", *registered_schemes()])

    def __len__(self) -> int:
        return 1 + len(registered_schemes())

    def __repr__(self) -> str:
        return f"gopen_schemes({sorted(registered_schemes())}, user openers: {sorted(_OPENERS)})"


#: WebDataset's scheme -> opener table (see the module docstring).
gopen_schemes: MutableMapping[str, Opener] = _Schemes()


def gopen(
    url: str,
    mode: str = "rb",
    bufsize: int = 8192,
    *,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
    **kw: Any,
) -> BinaryIO:
    """Open ``url`` (a path or any registered scheme) for reading ("rb") or writing ("wb").

    An opener assigned to ``gopen_schemes`` is called as WebDataset calls it:
    ``opener(url, mode, bufsize, **kw)``. Other schemes go through shardstream's sources, which
    choose their own block sizes: there only the default ``bufsize`` is accepted (another value
    raises rather than being silently ignored), and so are no further keywords. ``pipe:`` URLs
    need ``allow_pipe=True`` (or ``SHARDSTREAM_ALLOW_PIPE=1``); ``storage_options=`` passes
    source options.
    """
    if url == "-":  # WebDataset: standard input / output
        if mode not in ("rb", "wb"):
            raise ValueError(f"unknown mode {mode}")
        return sys.stdin.buffer if mode == "rb" else sys.stdout.buffer
    if scheme_of(url) == "file":
        refuse_if_enforced("gopen: unsafe_gopen is False, cannot open local files")
    if scheme_of(url) == "pipe":
        refuse_if_enforced("gopen_pipe: unsafe_gopen is False, cannot open pipe URLs")
    opener = _OPENERS.get(scheme_of(url))
    if opener is not None:
        return opener(url, mode, bufsize, **kw)
    if bufsize != 8192:
        raise TypeError(
            f"gopen(bufsize={bufsize}) has no effect: shardstream's sources choose their own block "
            "sizes; drop the argument"
        )
    if kw:
        raise TypeError(f"gopen() got unexpected keyword arguments {sorted(kw)} for {scheme_of(url)}: URLs")
    pipe = _allow_pipe(allow_pipe)
    if mode.startswith("r"):
        return open_url(os.fspath(url), storage_options=storage_options, allow_pipe=pipe)
    if mode.startswith("w"):
        return create_url(os.fspath(url), storage_options=storage_options, allow_pipe=pipe)
    raise ValueError(f"gopen mode {mode!r} is not supported; use 'rb' or 'wb'")


def reader(url: str, **kw: Any) -> BinaryIO:
    """``gopen(url, "rb", **kw)`` (WebDataset's ``gopen.reader``)."""
    return gopen(url, "rb", **kw)


def gopen_file(url: str, mode: str = "rb", bufsize: int = 8192) -> BinaryIO:
    """A local path or ``file:`` URL (WebDataset's opener)."""
    return gopen(re.sub(r"^file://?", "/", url) if url.startswith("file:") else url, mode)


def gopen_pipe(url: str, mode: str = "rb", bufsize: int = 8192, *, allow_pipe: bool = False) -> BinaryIO:
    """A ``pipe:`` URL: runs its shell command, so only with ``allow_pipe=True`` or
    ``SHARDSTREAM_ALLOW_PIPE=1``."""
    if not url.startswith("pipe:"):
        raise ValueError(f"gopen_pipe needs a pipe: URL, got {redact_url(url)!r}")
    return gopen(url, mode, allow_pipe=allow_pipe)


def gopen_curl(url: str, mode: str = "rb", bufsize: int = 8192) -> BinaryIO:
    """An ``http(s)://`` URL, read through shardstream's HTTP source (no ``curl`` child)."""
    if not mode.startswith("r"):
        raise ValueError(f"{mode}: gopen_curl can only read here; write with gopen(url, 'wb')")
    return gopen(url, mode)


def gopen_htgs(url: str, mode: str = "rb", bufsize: int = 8192) -> BinaryIO:
    """An ``htgs://`` URL read as ``https://`` (WebDataset's opener)."""
    return gopen_curl(re.sub(r"(?i)^htgs://", "https://", url), mode)


_COMMANDS = "it runs an external command (curl with a token, gsutil, ais) as a pipe"
gopen_hf = omitted("gopen_hf", _COMMANDS + "; read https://huggingface.co/... URLs directly")
gopen_gsutil = omitted("gopen_gsutil", _COMMANDS + "; use pipe:gsutil cat ... with allow_pipe=True")
gopen_ais = omitted("gopen_ais", _COMMANDS + "; use pipe:ais get ... - with allow_pipe=True")
Pipe = omitted(
    "Pipe", "shardstream runs pipe: commands itself (opt-in: allow_pipe=True); open them with gopen()"
)


def set_options(
    obj: Any, timeout: Any = None, ignore_errors: Any = None, ignore_status: Any = None, handler: Any = None
) -> bool:
    """WebDataset sets options on its ``Pipe`` streams; shardstream has none: always False."""
    return False


def rewrite_url(url: str) -> str:
    """``url`` rewritten by the first matching rule of ``GOPEN_REWRITE`` (``"from=to;from2=to2"``)."""
    rules = gopen_rewrite()
    if rules is None:
        return url
    refuse_if_enforced("rewrite_url: unsafe_gopen is False, cannot rewrite URLs using environment variables")
    for rule in rules.split(";"):
        prefix, replacement = rule.split("=", 1)
        rewritten = re.sub("^" + prefix, replacement, url)
        if rewritten != url:
            return rewritten
    return url
