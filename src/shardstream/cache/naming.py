"""URL -> cache path: readable, keeping scheme, host/bucket and path so sources never collide.

``s3://b1/train-000.tar`` is cached as ``s3/b1/train-000.tar`` and
``http://h:8080/b2/train-000.tar`` as ``http/h_8080/b2/train-000.tar``. Characters that are
unsafe in file names are percent-encoded, path components that could escape the cache
(``..``) or clash with its bookkeeping (names starting with ``.``) are escaped, a query string
becomes a short hash suffix, and over-long components are shortened with a hash, so the mapping
stays injective in practice while a human can still find a shard with ``ls``.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
from collections.abc import Callable

from ..errors import ConfigurationError, redact_url
from ..paths import check_relative_path

__all__ = ["NameFunction", "cache_name", "check_name", "pipe_cleaner", "url_to_cache_name"]

#: Maps a URL to a relative cache path (``url_to_name=`` of WebDataset and the cache opener).
NameFunction = Callable[[str], str]

_SAFE = "-_.+=,@"  # not "~": it separates owner tags in bookkeeping names
_MAX_COMPONENT = 200
_PIPE_URL = re.compile(r"^(https?|hdfs|gs|ais|s3|file):")


def _hash(text: str, n: int = 10) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


def _component(part: str) -> str:
    quoted = urllib.parse.quote(part, safe=_SAFE)
    if quoted in ("", ".", ".."):
        quoted = quoted.replace(".", "%2E") or "%00"
    elif quoted.startswith("."):
        # Leading dots would hide entries and could clash with the ``.shardstream`` bookkeeping tree.
        quoted = "%2E" + quoted[1:]
    if len(quoted) > _MAX_COMPONENT:
        quoted = quoted[: _MAX_COMPONENT - 12] + "~" + _hash(quoted)
    return quoted


#: Schemes whose URLs carry a query string (and a fragment); every other store's key is all path.
_QUERY_SCHEMES = frozenset({"http", "https"})


def pipe_cleaner(spec: str) -> str:
    """The real URL inside a ``pipe:`` spec (first word that looks like a URL), else ``spec``.

    WebDataset-compatible (``webdataset.cache.pipe_cleaner``).
    """
    if spec.startswith("pipe:"):
        for word in spec[5:].split():
            if _PIPE_URL.match(word):
                return word
    return spec


def cache_name(url: str) -> str:
    """Relative cache path for ``url`` (``/``-separated): ``scheme/host/path...``.

    ``pipe:`` specs are named after the URL they contain; when none is found the whole command
    is hashed under ``pipe/``. Credentials in the URL never reach the name.
    """
    inner = pipe_cleaner(url)
    if inner.startswith("pipe:"):
        return f"pipe/{_hash(inner, 16)}"
    parts = urllib.parse.urlsplit(inner)
    scheme = (parts.scheme or "file").lower()
    if scheme not in _QUERY_SCHEMES and (parts.query or parts.fragment):
        # An object store's key may hold '?' and '#': they are part of its path, not a query.
        parts = urllib.parse.urlsplit(inner.replace("%", "%25").replace("?", "%3F").replace("#", "%23"))
        parts = parts._replace(path=urllib.parse.unquote(parts.path))
    host = parts.hostname or ""
    if scheme in ("abfs", "abfss") and parts.username:
        # abfs[s]://container@account.dfs.core.windows.net/key: the user part is the container
        host = f"{parts.username}@{host}"
    try:
        port: int | str | None = parts.port
    except ValueError:  # not a number ("h:x"): such a URL opens nowhere, but naming it must not fail
        port = parts.netloc.rpartition(":")[2]
    if port is not None:
        host = f"{host}_{port}"
    path = [p for p in parts.path.split("/") if p]
    if not path:
        path = ["%00"]
    components = [scheme] + ([host] if host else []) + path
    name = "/".join(_component(c) for c in components)
    if parts.query:
        # Query strings rarely name different objects for shard stores, but when they do the
        # suffix keeps them apart. It is a hash, so signatures never appear on disk.
        name += f"@{_hash(parts.query)}"
    return name


_NAME_FIX = (
    "A cache name must be a relative path without empty, '.', '..' or dot-prefixed components (they "
    "could escape the cache directory or clash with its bookkeeping). Return something like "
    "'bucket/shard-000.tar', or leave url_to_name unset to use the default naming"
)


def check_name(name: str, url: str = "") -> str:
    """Validate a relative cache name from a user's ``url_to_name``; returns it normalised.

    The path check is :func:`shardstream.paths.check_relative_path`'s; on top of it the cache
    refuses ``.`` and dot-prefixed components, which could clash with its ``.shardstream``
    bookkeeping. (:func:`cache_name` needs no check: it percent-encodes every separator and
    escapes ``.``/``..``, so no URL gives an unsafe name.)
    """
    if "://" in name or name.startswith("pipe:"):
        return cache_name(name)  # e.g. url_to_name=pipe_cleaner returns a URL: name it properly
    what = f"url_to_name returned {name!r} for {redact_url(url)}:"
    check_relative_path(name, what=what + " the cache name", fix=_NAME_FIX)
    norm = name.replace(os.sep, "/")
    if any(p == "." or p.startswith(".") for p in norm.split("/")):
        raise ConfigurationError(f"{what} the cache name has a '.' or dot-prefixed component. {_NAME_FIX}.")
    return norm


def url_to_cache_name(url: str, ndir: int = 0) -> str:
    """WebDataset's naming: the last ``ndir + 1`` path components of ``url``.

    Kept for compatibility only: basenames collide across buckets and hosts, which is why the
    cache uses :func:`cache_name` unless ``url_to_name`` asks otherwise.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"url_to_cache_name needs a str URL, got {type(url).__name__}: {url!r}")
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file", "http", "https", "ftp", "ftps", "gs", "s3", "ais"):
        components = parsed.path.lstrip("/").split("/")
        name = "/".join(components[-1 - ndir :])
        if name:  # "" (a URL without a path) names no file; WebDataset returns it too
            check_relative_path(
                name,
                what=f"url_to_cache_name(ndir={ndir}) gives the cache name",
                url=url,
                fix=(
                    "Name the shard by a URL without '..' or empty path components, or use the "
                    "default cache naming (cache_name), which encodes any URL safely"
                ),
            )
        return name
    # Every '/' is percent-encoded: one component, and never '.' or '..' (the URL has a scheme).
    return urllib.parse.quote(url, safe="_+{}*,-")[-128:]
