"""WebDataset-compatible ``tariterators``: dict-based building blocks over our reader.

These keep WebDataset's item shapes (``{"url", "stream"}``, ``{"fname", "data", "__url__"}``)
for code that composes them by hand; the fast path is the reading stage,
:class:`shardstream.pipeline.ReadShards`.

WebDataset's module also binds what it imports (the ``filters`` and ``gopen`` modules); so does
this one, for code that reaches them through it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..config import read_settings
from ..handlers import Handler, reraise_exception
from ..readers.read_shards import ReadShards
from ..shards.spec import expand_urls
from ..sources import SchemeRouter, open_url
from ..tar.grouping import group_samples, split_key
from ..tar.reader import iter_members
from ..tar.samples import TarFormat
from . import filters as filters
from . import gopen as gopen

__all__ = [
    "base_plus_ext",
    "meta_prefix",
    "meta_suffix",
    "shardlist",
    "group_by_keys",
    "tar_file_expander",
    "tar_file_iterator",
    "tarfile_samples",
    "tarfile_to_samples",
    "trace",
    "url_opener",
    "valid_sample",
]


#: WebDataset's debugging switch (unused: shardstream logs instead).
trace = False
#: WebDataset's markers of metadata member names (``__name__``).
meta_prefix = "__"
meta_suffix = "__"


def shardlist(urls: str | Iterable[str], *, shuffle: bool = False) -> Iterator[dict[str, str]]:
    """``{"url": ...}`` for each URL of a spec or list, optionally shuffled (unseeded, as WebDataset)."""
    expanded = expand_urls(urls) if isinstance(urls, str) else list(urls)
    if shuffle:
        random.shuffle(expanded)
    for url in expanded:
        yield {"url": url}


def base_plus_ext(path: str) -> tuple[str | None, str | None]:
    """``"dir/a.b.c"`` -> ``("dir/a", "b.c")``; ``(None, None)`` without a usable dot."""
    parts = split_key(path)
    return (None, None) if parts is None else parts


def valid_sample(sample: Any) -> bool:
    return isinstance(sample, dict) and len(sample) > 0 and not sample.get("__bad__", False)


def url_opener(
    data: Iterable[dict[str, Any]], handler: Handler = reraise_exception, **kw: Any
) -> Iterator[dict[str, Any]]:
    """``{"url"}`` -> ``{"url", "stream"}`` (``pipe:`` URLs with ``allow_pipe=True`` or
    ``SHARDSTREAM_ALLOW_PIPE=1``)."""
    kw.setdefault("allow_pipe", read_settings().allow_pipe)
    for sample in data:
        try:
            yield {**sample, "stream": open_url(sample["url"], **kw)}
        except Exception as exn:
            if handler(exn):
                continue
            break


def tar_file_iterator(
    fileobj: Any,
    skip_meta: Any = None,
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    *,
    url: str | None = None,
) -> Iterator[dict[str, Any]]:
    """``{"fname", "data"}`` for each regular member of an open tar stream.

    ``skip_meta``: a regular expression (or compiled pattern); members whose name matches are
    skipped (WebDataset's ``__..__`` metadata convention, say ``r"__[^/]*__($|/)"``).
    ``url``: the shard's URL, named by errors (default: the stream's ``name``, else ``<stream>``).
    """
    meta = re.compile(skip_meta) if isinstance(skip_meta, str) else skip_meta
    if url is None:
        name = getattr(fileobj, "name", None)
        url = name if isinstance(name, str) else "<stream>"
    try:
        for name, data, _offset in iter_members(fileobj, url):
            if meta is not None and meta.match(name):
                continue
            if rename_files is not None:
                name = rename_files(name)
            if select_files is not None and not select_files(name):
                continue
            yield {"fname": name, "data": data}
    except Exception as exn:
        if not handler(exn):
            return


def tar_file_expander(
    data: Iterable[dict[str, Any]],
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    eof_value: Any = None,
) -> Iterator[dict[str, Any]]:
    """``{"url", "stream"}`` -> ``{"fname", "data", "__url__"}`` for every member."""
    for source in data:
        url = source["url"]
        stream = source["stream"]
        try:
            for item in tar_file_iterator(
                stream, handler=handler, select_files=select_files, rename_files=rename_files, url=url
            ):
                item["__url__"] = url
                yield item
            if eof_value is not None:
                yield eof_value
        finally:
            stream.close()


def group_by_keys(
    data: Iterable[dict[str, Any]],
    keys: Any = None,
    lcase: bool = True,
    suffixes: set[str] | None = None,
    handler: Handler = reraise_exception,
) -> Iterator[dict[str, Any]]:
    """``{"fname", "data", "__url__"}`` items -> samples (consecutive members with one key).

    ``keys``: a function ``name -> (key, extension)`` replacing the default rule
    (:func:`base_plus_ext`); ``handler``: the error policy for a malformed group (a repeated
    extension), which by default raises.
    """
    url = None
    batch: list[tuple[str, bytes, int]] = []

    def flush() -> Iterator[dict[str, Any]]:
        try:
            yield from group_samples(batch, str(url), lcase=lcase, suffixes=suffixes)
        except Exception as exn:
            if not handler(exn):
                raise StopGrouping from exn

    try:
        for item in data:
            if not item:
                continue
            if item["__url__"] != url and batch:
                yield from flush()
                batch = []
            url = item["__url__"]
            name = item["fname"]
            if keys is not None:
                key, ext = keys(name)
                if key is None or ext is None:
                    continue
                name = f"{key}.{ext}"
            batch.append((name, item["data"], -1))
        if batch:
            yield from flush()
    except StopGrouping:
        return


class StopGrouping(Exception):
    """Internal: the handler of :func:`group_by_keys` asked to end the stream."""


def tarfile_to_samples(
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
) -> ReadShards:
    """Stage factory: ``wds.tarfile_to_samples()`` turns shard dicts into samples.

    ``pipe:`` URLs are refused unless ``SHARDSTREAM_ALLOW_PIPE=1`` (read here, when the stage is
    made); the native :class:`~shardstream.pipeline.ReadShards` takes ``source=`` instead.
    """
    source = SchemeRouter(allow_pipe=True) if read_settings().allow_pipe else None
    return ReadShards(TarFormat(select_files, rename_files), source, handler=handler)


def tarfile_samples(
    src: Iterable[Any],
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Function form of :func:`tarfile_to_samples` (WebDataset's ``tarfile_samples``)."""
    return tarfile_to_samples(handler, select_files, rename_files)(src)
