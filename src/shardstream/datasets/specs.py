"""Shard specs -> shard URLs, checked before the first sample: the one grammar of every front door.

``ss.ShardStream``, ``WebDataset``, ``ShardDataset`` and the command line (``ls``, ``stat``,
``verify``, ``index``, ``unpack``, ``bench``) all turn what they are given into URLs here. A spec
is one of, or a list or ``::``-joined string of:

* a URL or path, or a brace pattern (``data/train-{000000..000099}.tar``), with ``${NAME}``
  variables (:func:`~shardstream.shards.spec.expand_urls`);
* a local directory: its ``*.tar``, ``*.tar.gz`` and ``*.tgz`` files, sorted (hidden ones left out);
* a local glob (``data/train-*.tar``), sorted;
* a store prefix ending in ``/`` (``s3://bucket/train/``, ``gs://``, ``az://``, ``hf://``, an
  ``http(s)://`` one that holds an index): the shards its ``_info.json`` lists, else, on a store
  that lists, the shards directly under it;
* an index (``.../_info.json``, or any ``.json`` written by ``shardstream index``): the shards it lists.

Checking (:func:`check_shards`): a brace range that runs past the last shard would otherwise fail
when the missing shard is reached, hours into a run. Local shards are looked up on disk: each
directory is listed once when it holds many of them (cheaper than one ``stat`` per shard, and
exact where an index could be stale), else one ``stat`` each. Remote shards are compared with the
names of the ``_info.json`` beside them (one request per directory, none per shard). Remote shards
without an index are not checked: one request per shard would cost more than the check saves,
and a missing one still fails when it is opened.

Cost: a brace spec of plain shard names is expanded once and recognised as such by one scan of
the joined text, with no per-URL filesystem call except the existence check
(``benchmarks/results/bench_specs.md``: 1M names, 100k local shards, 1M indexed remote names).
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, ShardNotFoundError, ShardStreamError, redact_url
from ..shards.spec import expand_urls
from ..sources import get_source, scheme_of, with_defaults
from ..sources.file import local_path
from ..tar.index import INDEX_NAME, CountTable, read_count_table

__all__ = ["SHARD_SUFFIXES", "Spec", "check_shards", "describe_spec", "resolve_shards"]

log = logging.getLogger(__name__)

#: File names a directory or a listed prefix contributes.
SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")
#: A spec: one string (``::``-joined parts), a path, or a list of them.
Spec = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

_GLOB = "*?["
#: Missing shards named in the error.
_SHOWN = 5
#: Above this many shards named in one local directory, the directory is listed instead of
#: ``stat``-ing each.
_LIST_ABOVE = 256
#: Remote directories whose index is read for the check, at most (one request each).
_MAX_INDEXES = 64


def resolve_shards(
    spec: Spec, *, storage_options: Mapping[str, Any] | None = None, check: bool = True
) -> list[str]:
    """The shard URLs ``spec`` names, in order (a list keeps its repeats).

    Args:
        spec: see the module docstring.
        storage_options: options for the sources that list prefixes and read indexes.
        check: raise when a local or indexed shard is missing (:func:`check_shards`).

    Raises:
        ConfigurationError: the spec names nothing (an empty directory, a glob without matches,
            a prefix without shards or index) or names an unset ``${VARIABLE}``.
        ShardNotFoundError: ``check`` and some shards are missing (how many, and the first names).
    """
    options = dict(storage_options or {})
    urls = expand_urls(_strings(spec))
    if not _plain(urls):
        resolved: list[str] = []
        for url in urls:
            resolved.extend(_forms(url, options))
        urls = resolved
    if check:
        check_shards(urls, spec, storage_options=options)
    return urls


def describe_spec(spec: Spec) -> str:
    """The spec as an error message quotes it: the string (credentials removed), or the list's size."""
    if isinstance(spec, str | os.PathLike):
        return repr(redact_url(os.fspath(spec)))
    items = list(spec)
    if len(items) == 1:
        return repr(redact_url(os.fspath(items[0])))
    return f"a list of {len(items)} URLs"


def check_shards(
    urls: Sequence[str], spec: Spec, *, storage_options: Mapping[str, Any] | None = None, remote: bool = True
) -> bool:
    """Raise if a local or indexed shard of ``urls`` is missing; whether every shard was checked.

    ``False`` means some shards could not be checked cheaply (remote without a readable
    ``_info.json`` beside them, ``pipe:`` commands, signed ``http(s)://`` URLs, shards in more
    than 64 remote directories): their existence, and their sample counts, are unknown until
    they are read.

    ``remote=False`` checks local shards only (for a caller that reads the remote indexes itself:
    ``ShardDataset``, whose index reader fails on a shard its index lacks and that cannot be read).

    Raises:
        ShardNotFoundError: names how many of how many shards ``spec`` names are missing, the first
            few, and the fix.
    """
    missing: list[str] = []
    checked = True
    groups = _by_directory(urls)
    remotes = 0
    for directory, names in groups.items():
        first = _join(directory, names[0])
        scheme = scheme_of(first)
        if scheme == "file":
            missing += _missing_locally(directory, names)
            continue
        remotes += 1
        if (
            not remote
            or scheme == "pipe"
            or remotes > _MAX_INDEXES
            or (scheme in ("http", "https") and "?" in first)
        ):
            checked = False
            continue
        table = _remote_index(directory, storage_options)
        if table is None:
            checked = False
            continue
        group = urls if len(groups) == 1 else [_join(directory, n) for n in names]
        if table.locate(group) is not None:
            continue
        absent = [n for n in names if n not in table]
        if absent and any("/" in n for n in table.names.tolist()):
            checked = False  # an index keyed by paths, not basenames: it cannot tell
            continue
        missing += [_join(directory, n) for n in absent]
    if missing:
        raise _missing_error(missing, len(urls), spec)
    return checked


# -- the forms of a spec ------------------------------------------------------------------------


def _strings(spec: Spec) -> str | list[str]:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, os.PathLike):
        return os.fspath(spec)
    if isinstance(spec, Sequence) and all(type(s) is str for s in spec):
        return spec  # type: ignore[return-value]  # (a list of strings: expand_urls keeps it as is)
    return [os.fspath(s) for s in spec]


def _plain(urls: list[str]) -> bool:
    """Whether every URL is a shard name as it stands: no glob character, and each ending in a
    shard suffix (so no directory, prefix or index). Counted on the joined text, in C: no
    Python step per URL."""
    if not urls:
        return True
    text = "\n".join(urls) + "\n"
    if any(c in text for c in _GLOB) or text.count("\n") != len(urls):
        return False
    return sum(text.count(suffix + "\n") for suffix in SHARD_SUFFIXES) == len(urls)


def _forms(url: str, options: Mapping[str, Any]) -> list[str]:
    """The shards one URL names: itself, or a directory's, a glob's, a prefix's or an index's."""
    if url.endswith(".json") and scheme_of(url) != "pipe":
        return _from_index_file(url, options)
    if scheme_of(url) == "file":
        path = local_path(url)
        if url.endswith("/") or (not url.endswith(SHARD_SUFFIXES) and os.path.isdir(path)):
            return _local_directory(path, options)
        if any(c in path for c in _GLOB) and not os.path.exists(path):
            found = sorted(p for p in glob.glob(path) if os.path.isfile(p))
            if not found:
                raise ConfigurationError(
                    f"the pattern {path!r} matches no files; check the directory and the pattern "
                    "(`ls` it in a shell)"
                )
            return found
        return [url]
    if url.endswith("/"):
        return _from_prefix(url, options)
    return [url]


def _local_directory(path: str, options: Mapping[str, Any]) -> list[str]:
    if not os.path.isdir(path):
        raise ShardNotFoundError(
            f"the directory {path!r} does not exist; check the path (a spec ending in '/' names a "
            "directory of shards)",
            url=path,
        )
    names = sorted(n for n in os.listdir(path) if n.endswith(SHARD_SUFFIXES) and not n.startswith("."))
    if names:
        return [os.path.join(path, n) for n in names]
    if os.path.exists(os.path.join(path, INDEX_NAME)):
        return _from_index_file(os.path.join(path, INDEX_NAME), options)
    raise ConfigurationError(
        f"directory {path!r} holds no shards (files ending in {', '.join(SHARD_SUFFIXES)}); write "
        "some with ShardWriter or `shardstream write`, or name the shards with a pattern"
    )


def _from_index_file(url: str, options: Mapping[str, Any]) -> list[str]:
    """The shards an index lists, as URLs beside it."""
    directory = url.rpartition("/")[0]
    names = read_count_table(url, storage_options=options).names.tolist()
    if not names:
        raise ConfigurationError(f"the index {redact_url(url)} lists no shards")
    return [_join(directory, n) for n in names]


def _from_prefix(prefix: str, options: Mapping[str, Any]) -> list[str]:
    """The shards of a remote prefix: its ``_info.json``'s, else the store's listing."""
    try:
        return _from_index_file(prefix.rstrip("/") + "/" + INDEX_NAME, options)
    except ShardNotFoundError:
        pass
    listed = _listed_shards(prefix, options)
    if listed is None:
        raise ConfigurationError(
            f"{redact_url(prefix)} holds no {INDEX_NAME} index, and {scheme_of(prefix)}:// is not "
            f"listed; name the shards with a brace spec (e.g. "
            f"'{redact_url(prefix)}train-{{000000..000099}}.tar'), then `shardstream index` it to make "
            "the prefix usable as a spec"
        )
    return listed


def _listed_shards(prefix: str, options: Mapping[str, Any]) -> list[str] | None:
    """The shards directly under ``prefix`` of a store that lists (``None``: it does not)."""
    source = with_defaults(get_source(prefix, options)).route(prefix)
    if not source.can_list:
        return None
    base = prefix.rstrip("/") + "/"
    names = sorted(
        item.key
        for item in source.list_objects(base)
        if "/" not in item.key and item.key.endswith(SHARD_SUFFIXES) and not item.key.startswith(".")
    )
    if not names:
        raise ConfigurationError(
            f"{redact_url(prefix)} holds no shards (objects ending in {', '.join(SHARD_SUFFIXES)} "
            "directly under it) and no index"
        )
    return [base + name for name in names]


# -- checking ---------------------------------------------------------------------------------


def _by_directory(urls: Sequence[str]) -> dict[str, list[str]]:
    """``{directory: [basename, ...]}`` in first-seen order; one directory found in bulk (the
    usual brace spec: the joined text is tested and split in C, no per-URL Python step)."""
    if not urls:
        return {}
    first = urls[0]
    base = first[: first.rfind("/") + 1]
    text = "\n".join(urls)
    if (
        text.startswith(base)
        and text.count("\n" + base) == len(urls) - 1
        and text.count("/") == len(urls) * base.count("/")
        and text.count("\n") == len(urls) - 1
    ):
        names = text[len(base) :].replace("\n" + base, "\n").split("\n")
        return {base[:-1]: names}
    groups: dict[str, list[str]] = {}
    for url in urls:
        directory, _, name = url.rpartition("/")
        groups.setdefault(directory, []).append(name)
    return groups


def _missing_locally(directory: str, names: list[str]) -> list[str]:
    if directory.startswith("file:"):  # (names may be %-escaped: each URL's own path)
        return [u for u in (_join(directory, n) for n in names) if not os.path.exists(local_path(u))]
    path = directory or "."
    if len(names) > _LIST_ABOVE:
        try:
            present = set(os.listdir(path))
        except OSError:
            present = set()
        return [_join(directory, n) for n in names if n not in present]
    return [_join(directory, n) for n in names if not os.path.exists(os.path.join(path, n))]


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _remote_index(directory: str, storage_options: Mapping[str, Any] | None) -> CountTable | None:
    """The counts table of the index beside remote shards, or ``None`` (none there, unreadable)."""
    try:
        return read_count_table(directory, storage_options=storage_options)
    except ShardNotFoundError:
        return None
    except (ShardStreamError, OSError) as exc:  # no index can be read: the shards are not checked
        log.debug("shards in %s not checked: its index cannot be read (%s)", redact_url(directory), exc)
        return None


def _missing_error(missing: list[str], total: int, spec: Spec) -> ShardNotFoundError:
    shown = ", ".join(redact_url(u.rpartition("/")[2] or u) for u in missing[:_SHOWN])
    more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
    directories = list(dict.fromkeys(u.rpartition("/")[0] for u in missing))
    where = f" (in {redact_url(directories[0]) or '.'})" if len(directories) == 1 else ""
    local = scheme_of(missing[0]) == "file"
    if local:
        fix = (
            "Check the spec against the files (a brace range must end at the last shard: "
            f"`shardstream ls {redact_url(directories[0]) or '.'}` lists them), or pass the directory "
            "itself to read every shard in it"
        )
    else:
        fix = (
            f"They are not listed in the {INDEX_NAME} beside them: check the brace range against the "
            "index, or, if the shards exist, index them again with `shardstream index "
            f"{redact_url(directories[0])}/`"
        )
    return ShardNotFoundError(
        f"{len(missing)} of {total} shards named by {describe_spec(spec)} are missing: {shown}{more}"
        f"{where}. {fix}.",
        url=missing[0],
    )
