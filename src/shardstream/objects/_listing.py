"""Finding a prefix's :class:`~.manifest.Manifest` (:func:`load_manifest`), and listing a prefix
into one: S3 (paginated, in parallel by sub-prefix) and local directories. HTTP has no listing:
it needs a manifest.

S3 returns at most 1,000 keys per LIST page and pages are sequential, so a flat listing of 10
million keys is 10,000 round trips one after another. The first request asks with
``Delimiter="/"``: it returns the objects directly under the prefix and the sub-prefixes
("directories"); the sub-prefixes are then listed fully, up to 8 at a time. A prefix without
sub-prefixes is listed in sequence (its first page is already the delimiter page).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import ConfigurationError, ShardNotFoundError, redact_url
from ..forks import GatedExecutor
from ..sources import get_source, scheme_of
from .manifest import MANIFEST_NAME, Manifest, _relative, prefix_url, read_manifest_file

__all__ = ["list_prefix", "load_manifest"]

log = logging.getLogger(__name__)

_PARALLEL_LISTS = 8
_Row = tuple[str, int, str]


def _cache_path(manifest_dir: str, root: str, storage_options: Mapping[str, Any] | None) -> str:
    endpoint = str((storage_options or {}).get("endpoint_url", ""))
    digest = hashlib.blake2b(f"{root}\0{endpoint}".encode(), digest_size=10).hexdigest()
    return os.path.join(manifest_dir, f"{digest}.jsonl")


def load_manifest(
    url: str,
    manifest: str | Manifest | Iterable[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    manifest_dir: str | None = None,
    refresh: bool = False,
) -> Manifest:
    """The manifest of prefix ``url`` (see :mod:`.manifest` for the order of sources).

    Args:
        url: the prefix (``s3://bucket/prefix``, ``https://host/prefix`` or a local directory).
        manifest: a :class:`Manifest`, a list of keys, or the path/URL of a key list, JSONL or
            S3 Inventory CSV file.
        storage_options: options for the sources (endpoint, credentials, ...).
        manifest_dir: directory where listings are saved and looked up (default: none).
        refresh: list again even when a saved listing exists.
    """
    root = prefix_url(url)
    if isinstance(manifest, Manifest):
        return manifest
    if manifest is not None and not isinstance(manifest, str):
        return Manifest(root, [_relative(root, k, "the manifest list") for k in manifest])
    if manifest is not None:
        return read_manifest_file(manifest, root, storage_options)
    cached = _cache_path(manifest_dir, root, storage_options) if manifest_dir else None
    if not refresh:
        if cached is not None and os.path.exists(cached):
            log.info("manifest of %s from %s", redact_url(root), cached)
            return read_manifest_file(cached, root, storage_options)
        try:
            found = read_manifest_file(root + MANIFEST_NAME, root, storage_options)
            log.info("manifest of %s from %s%s", redact_url(root), redact_url(root), MANIFEST_NAME)
            return found
        except ShardNotFoundError:
            pass
    listed = list_prefix(root, storage_options)
    if cached is not None:
        listed.save(cached)
    return listed


def list_prefix(root: str, storage_options: Mapping[str, Any] | None = None) -> Manifest:
    """List every object under ``root`` (a prefix ending with ``/``)."""
    scheme = scheme_of(root)
    if scheme == "file":
        rows = list(_walk(root))
    elif scheme == "s3":
        rows = _list_s3(root, storage_options)
    else:
        raise ConfigurationError(
            f"cannot list {redact_url(root)}: {scheme}:// has no listing. Pass manifest= (a text "
            "file of keys, JSONL, or an S3 Inventory CSV), or use an s3:// or local prefix"
        )
    rows = [r for r in rows if r[0].rsplit("/", 1)[-1] != MANIFEST_NAME]
    if not rows:
        raise ShardNotFoundError(
            f"no objects under {redact_url(root)}; check the prefix (it is listed recursively) "
            "and, for S3, endpoint_url and the bucket name",
            url=root,
        )
    log.info("listed %s: %d objects", redact_url(root), len(rows))
    keys, sizes, etags = (list(col) for col in zip(*sorted(rows), strict=True))
    return Manifest(root, keys, sizes, etags)


def _walk(root: str) -> Iterator[_Row]:
    base = root[:-1]
    if not os.path.isdir(base):
        raise ShardNotFoundError(f"{base!r} is not a directory; give the directory of the objects", url=base)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, base)
        for name in filenames:
            if name.startswith("."):
                continue
            path = os.path.join(dirpath, name)
            key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
            yield key, os.path.getsize(path), ""


def _list_s3(root: str, storage_options: Mapping[str, Any] | None) -> list[_Row]:
    source: Any = get_source(root, storage_options)
    bucket, _, prefix = root[len("s3://") :].partition("/")
    client = source.client

    def pages(sub: str, delimiter: bool) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": bucket, "Prefix": sub}
            if delimiter:
                args["Delimiter"] = "/"
            if token:
                args["ContinuationToken"] = token
            try:
                page: dict[str, Any] = client.list_objects_v2(**args)
            except Exception as exc:
                raise source.translate(exc, f"s3://{bucket}/{sub}", "list") from exc
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def rows(page: Mapping[str, Any]) -> list[_Row]:
        return [
            (obj["Key"][len(prefix) :], int(obj.get("Size", -1)), str(obj.get("ETag", "")))
            for obj in page.get("Contents", ())
            if not obj["Key"].endswith("/")
        ]

    def list_all(sub: str) -> list[_Row]:
        return [row for page in pages(sub, False) for row in rows(page)]

    out: list[_Row] = []
    subs: list[str] = []
    for page in pages(prefix, True):
        out.extend(rows(page))
        subs.extend(p["Prefix"] for p in page.get("CommonPrefixes", ()))
    if len(subs) == 1:
        out.extend(list_all(subs[0]))
    elif subs:
        with GatedExecutor(min(_PARALLEL_LISTS, len(subs)), thread_name_prefix="shardstream-list") as pool:
            for part in pool.map(list_all, subs):
                out.extend(part)
    return out
