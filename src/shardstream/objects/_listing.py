"""Finding a prefix's :class:`~.manifest.Manifest` (:func:`load_manifest`), and listing a prefix
into one through its source's ``list_objects`` capability (how each store lists, S3 in parallel by
sub-prefix, is the source's business). HTTP has no listing: it needs a manifest.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError, ShardNotFoundError, redact_url
from ..sources import get_source, scheme_of, with_defaults
from .manifest import MANIFEST_NAME, Manifest, _relative, prefix_url, read_manifest_file

__all__ = ["list_prefix", "load_manifest"]

log = logging.getLogger(__name__)


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
    """List every object under ``root`` (a prefix ending with ``/``) through its source's
    ``list_objects`` (local directories, ``s3://``, ``gs://``, ``az://``, ``hf://``, fsspec)."""
    source = with_defaults(get_source(root, storage_options)).route(root)
    if not source.can_list:
        raise ConfigurationError(
            f"cannot list {redact_url(root)}: {scheme_of(root)}:// has no listing. Pass manifest= (a "
            "text file of keys, JSONL, or an S3 Inventory CSV), or use a prefix of a store that lists "
            "(a local directory, s3://, gs://, az://, hf://)"
        )
    rows = [
        (item.key, item.size, item.etag)
        for item in source.list_objects(root)
        if item.key.rsplit("/", 1)[-1] != MANIFEST_NAME
    ]
    if not rows:
        raise ShardNotFoundError(
            f"no objects under {redact_url(root)}; check the prefix (it is listed recursively) "
            "and, for object stores, the endpoint and the bucket or container name",
            url=root,
        )
    log.info("listed %s: %d objects", redact_url(root), len(rows))
    keys, sizes, etags = (list(col) for col in zip(*sorted(rows), strict=True))
    return Manifest(root, keys, sizes, etags)
