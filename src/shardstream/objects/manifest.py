"""The manifest of a prefix of single-sample objects: keys, sizes and ETags, listed once.

A :class:`Manifest` is built once, in the process that creates the dataset, and travels to
DataLoader workers and ranks by pickling, so no worker and no epoch lists the prefix again.
:func:`~._listing.load_manifest` decides where it comes from, cheapest first:

1. a user manifest (``manifest=`` a path or URL): a text file of keys (one per line, relative
   to the prefix or full URLs under it), JSONL (``{"key": ..., "size": ..., "etag": ...}`` per
   line, our own saved format included), or an S3 Inventory CSV (``.csv``/``.csv.gz``:
   ``bucket,key[,size,...]``, keys URL-encoded). Zero LIST requests.
2. a saved listing in ``manifest_dir`` (keyed by the prefix URL), written by an earlier listing.
3. ``_manifest.jsonl`` beside the data (one GET; written by ``shardstream pack``/``unpack`` and
   by ``Manifest.save(beside_data=True)``).
4. a listing (:func:`~._listing.list_prefix`: S3 LIST paginated and in parallel by sub-prefix; a local walk),
   then saved to ``manifest_dir`` when one is set.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from ..errors import ConfigurationError, redact_url
from ..sources import create_url, read_url, scheme_of

__all__ = ["MANIFEST_NAME", "Manifest", "prefix_url", "read_manifest_file"]

log = logging.getLogger(__name__)

#: The file name of a manifest saved beside the data.
MANIFEST_NAME = "_manifest.jsonl"
_VERSION = 1


def prefix_url(url: str) -> str:
    """``url`` as a prefix: local paths made absolute, a trailing ``/`` added (``s3://b/p`` ->
    ``s3://b/p/``; a bucket alone is ``s3://b/``)."""
    if scheme_of(url) == "file":
        path = url[len("file://") :] if url.startswith("file://") else url
        url = os.path.abspath(os.path.expanduser(path))
    return url if url.endswith("/") else url + "/"


@dataclass
class Manifest:
    """The objects under ``root``, sorted by key.

    Attributes:
        root: the prefix URL, ending with ``/``; an object's URL is ``root + key``.
        keys: object keys relative to ``root``, sorted.
        sizes: bytes per object (-1 when unknown, e.g. a plain key list).
        etags: ETag per object (``""`` when unknown); used to refuse an object that changes
            between two requests of one fetch.
    """

    root: str
    keys: list[str]
    sizes: list[int] = field(default_factory=list)
    etags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = prefix_url(self.root)
        n = len(self.keys)
        self.sizes = self.sizes or [-1] * n
        self.etags = self.etags or [""] * n
        if not (len(self.sizes) == len(self.etags) == n):
            raise ValueError(f"{n} keys but {len(self.sizes)} sizes and {len(self.etags)} etags")
        if any(a >= b for a, b in zip(self.keys, self.keys[1:], strict=False)):
            order = sorted(range(n), key=self.keys.__getitem__)
            self.keys = [self.keys[i] for i in order]
            self.sizes = [self.sizes[i] for i in order]
            self.etags = [self.etags[i] for i in order]

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"Manifest(root={redact_url(self.root)!r}, objects={len(self.keys)})"

    def url(self, i: int) -> str:
        return self.root + self.keys[i]

    @property
    def total_bytes(self) -> int:
        return sum(s for s in self.sizes if s > 0)

    # -- saving ------------------------------------------------------------------------------------
    def dumps(self) -> str:
        """The manifest as JSONL: a header line, then one object per line."""
        head = json.dumps({"shardstream_manifest": _VERSION, "root": self.root, "objects": len(self.keys)})
        lines = (
            json.dumps({"key": k, "size": s, "etag": e}, separators=(",", ":"))
            for k, s, e in zip(self.keys, self.sizes, self.etags, strict=True)
        )
        return "\n".join([head, *lines]) + "\n"

    def save(self, location: str, storage_options: Mapping[str, Any] | None = None) -> str:
        """Write the manifest to ``location`` (a path or URL; written whole, then renamed when local)."""
        data = self.dumps().encode()
        if scheme_of(location) == "file":
            os.makedirs(os.path.dirname(os.path.abspath(location)), exist_ok=True)
            tmp = f"{location}.tmp-{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, location)
        else:
            with create_url(location, storage_options=storage_options) as f:
                f.write(data)
        return location


def _relative(root: str, key: str, where: str) -> str:
    key = key.strip()
    if "://" in key or key.startswith("/"):
        full = prefix_url(key)[:-1] if scheme_of(key) == "file" else key
        if not full.startswith(root):
            raise ConfigurationError(
                f"{where} names {redact_url(key)!r}, which is not under the dataset prefix "
                f"{redact_url(root)!r}; give keys relative to the prefix or URLs under it"
            )
        return full[len(root) :]
    return key


def read_manifest_file(
    location: str, root: str, storage_options: Mapping[str, Any] | None = None
) -> Manifest:
    """Parse a key list, JSONL or S3 Inventory CSV file (see the module docstring)."""
    data = read_url(location, storage_options=storage_options)  # bounded by max_body
    if location.endswith(".gz") or data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    text = data.decode("utf-8")
    name = location.lower().removesuffix(".gz")
    keys: list[str] = []
    sizes: list[int] = []
    etags: list[str] = []
    if name.endswith(".csv"):
        bucket = root.split("/")[2] if root.startswith("s3://") else None
        for row in csv.reader(io.StringIO(text)):
            if len(row) < 2 or (bucket is not None and row[0] != bucket):
                continue
            key = unquote(row[1])
            full = f"s3://{row[0]}/{key}"
            if not full.startswith(root) or key.endswith("/"):
                continue
            keys.append(full[len(root) :])
            sizes.append(int(row[2]) if len(row) > 2 and row[2].isdigit() else -1)
        return Manifest(root, keys, sizes, [""] * len(keys))
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(
                    f"{redact_url(location)} line {number} is not valid JSON ({exc.msg}); a JSONL "
                    'manifest has one {"key": ...} object per line'
                ) from exc
            if "shardstream_manifest" in item:
                continue
            keys.append(_relative(root, str(item["key"]), f"{redact_url(location)} line {number}"))
            sizes.append(int(item.get("size", -1)))
            etags.append(str(item.get("etag", "")))
        else:
            keys.append(_relative(root, line, f"{redact_url(location)} line {number}"))
            sizes.append(-1)
            etags.append("")
    return Manifest(root, keys, sizes, etags)
