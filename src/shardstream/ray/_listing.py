"""Listing the files of a sample folder or an object store prefix, grouped into samples by key.

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
from ..sources import get_source, scheme_of, with_defaults
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
            log.debug("skipping %s: no extension in the file name", redact_url(location))
            continue
        samples.setdefault(parts[0], {})[parts[1]] = location
    if skipped:
        log.info("skipped %d files under %s without an extension (or dot files)", skipped, redact_url(root))
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
    """The samples in the objects under a store's prefix (``s3://``, ``gs://``, ``az://``,
    ``hf://``, fsspec's), listed by the source's ``list_objects``."""
    base = url if url.endswith("/") else url + "/"
    source = with_defaults(get_source(base, storage_options)).route(base)
    if not source.can_list:
        raise ConfigurationError(
            f"cannot list {redact_url(url)}: {scheme_of(url)}:// has no listing; pack a directory, a "
            ".parquet file of URLs, or a prefix of a store that lists (s3://, gs://, az://, hf://)"
        )
    names = sorted((item.key, base + item.key) for item in source.list_objects(base))
    return group_files(names, root=url)
