"""Datasets of single-sample objects: manifests, grouping into samples, and fetching ahead.

A prefix of objects (``s3://bucket/train/000017.jpg``, ``000017.cls``, ...) is listed once into
a :class:`Manifest`, grouped into samples by the tar members' key rules (:class:`SampleTable`),
and read by an :class:`ObjectReader` that keeps many requests in flight (:mod:`.fetch_loop`);
the same engine reads batches of byte ranges (:class:`RangeFetcher`).
The datasets built on it are :class:`shardstream.ObjectDataset` and
:class:`shardstream.ObjectStream`.
"""

from ._listing import load_manifest
from .fetch import DEFAULT_MAX_BYTES, DEFAULT_WINDOW, FetchAhead
from .manifest import MANIFEST_NAME, Manifest, prefix_url, read_manifest_file
from .ranges import RangeFetcher
from .reader import ObjectReader
from .samples import SampleTable

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_WINDOW",
    "MANIFEST_NAME",
    "FetchAhead",
    "Manifest",
    "ObjectReader",
    "RangeFetcher",
    "SampleTable",
    "load_manifest",
    "prefix_url",
    "read_manifest_file",
]
