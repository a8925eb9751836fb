"""Listing the files of a sample folder or an ``s3://`` prefix, grouped into samples by key.

Files are grouped as tar members are (:func:`~shardstream.tar.grouping.split_key`): the key is
the path relative to the root up to the first dot of the basename, the extension the rest, so
``train/cat01.jpg`` and ``train/cat01.cls`` form the sample ``train/cat01``. Names without an
extension, or starting with a dot, are skipped and counted. Listing runs on the driver; the files
are read by Ray tasks (on a cluster the folder must be on a filesystem every node mounts).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, redact_url
from ..sources import get_source
from ..tar.grouping import split_key

__all__ = ["Listing", "group_files", "list_folder", "list_prefix"]

log = logging.getLogger(__name__)

#: key -> extension -> path or URL of the file holding that field.
Listing = dict[str, dict[str, str]]


def group_files(names: Iterable[tuple[str, str]], *, root: str) -> Listing:
    """Group ``(relative name, location)`` pairs into samples by key (sorted by key)."""
    samples: Listing = {}
    skipped = 0
    for rel, location in names:
        parts = split_key(rel)
        if parts is None:
            skipped += 1
            log.debug("skipping %s: no extension in the file name", location)
            continue
        samples.setdefault(parts[0], {})[parts[1]] = location
    if skipped:
        log.info("skipped %d files under %s without an extension (or dot files)", skipped, root)
    if not samples:
        raise ConfigurationError(
            f"no sample files under {redact_url(root)} ({skipped} skipped); a sample is files named "
            "KEY.EXT (e.g. cat01.jpg + cat01.cls): check the path"
        )
    return dict(sorted(samples.items()))


def list_folder(root: Path) -> Listing:
    """The samples in the files under ``root`` (symlinks to files are followed)."""
    if not root.is_dir():
        raise ConfigurationError(f"{str(root)!r} is not a directory; pack a directory of KEY.EXT files")

    def walk() -> Iterable[tuple[str, str]]:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                yield path.relative_to(root).as_posix(), str(path.resolve())

    return group_files(walk(), root=str(root))


def list_prefix(url: str, storage_options: Mapping[str, Any] | None = None) -> Listing:
    """The samples in the objects under an ``s3://bucket/prefix/`` URL."""
    # Not urlsplit: '?' and '#' belong to an S3 key (see parse_s3_url).
    bucket, _, prefix = url[5:].partition("/") if url[:5].lower() == "s3://" else ("", "", "")
    if not bucket:
        raise ConfigurationError(f"{redact_url(url)} is not an s3://bucket/prefix URL")
    prefix = prefix.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    source: Any = get_source(url, storage_options)  # an S3Source: its botocore client lists
    names: list[tuple[str, str]] = []
    try:
        pages = source.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for item in page.get("Contents", ()):
                key = item["Key"]
                names.append((key[len(prefix) :], f"s3://{bucket}/{key}"))
    except Exception as exc:
        raise source.translate(exc, url, action="list") from exc
    return group_files(names, root=url)
