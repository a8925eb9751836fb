"""Objects -> samples: the objects sharing a key form one sample, by the tar members' key rules.

``train/000017.jpg`` and ``train/000017.cls`` are sample ``train/000017`` with fields ``jpg``
and ``cls``, exactly as two tar members with those names would be (see
:func:`shardstream.tar.grouping.split_key`): the key is the directory plus the basename up to its
first dot, the extension the rest (lower-cased). Names without a usable dot and ``__meta__``
names belong to no sample. Samples are ordered by key, so sample ``i`` means the same sample in
every process that holds the same manifest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, redact_url
from ..tar.grouping import split_key
from .manifest import Manifest

__all__ = ["SampleTable"]

_META = re.compile(r"(^|/)__[^/]*__($|/|\.)")


@dataclass
class SampleTable:
    """Samples of a manifest: ``keys[i]`` and its ``(extension, object number)`` fields.

    Build with :meth:`from_manifest`.
    """

    manifest: Manifest
    keys: list[str]
    fields: list[tuple[tuple[str, int], ...]]

    @classmethod
    def from_manifest(cls, manifest: Manifest, *, lcase: bool = True) -> SampleTable:
        groups: dict[str, list[tuple[str, int]]] = {}
        for i, name in enumerate(manifest.keys):
            if "__" in name and _META.search(name):
                continue
            parts = split_key(name)
            if parts is None:
                continue
            key, ext = parts
            if lcase:
                ext = ext.lower()
            members = groups.setdefault(key, [])
            if any(e == ext for e, _ in members):
                other = next(manifest.keys[j] for e, j in members if e == ext)
                raise ConfigurationError(
                    f"objects {other!r} and {name!r} under {redact_url(manifest.root)} both give "
                    f"sample {key!r} the field {ext!r}; rename one (extensions are lower-cased)"
                )
            members.append((ext, i))
        keys = sorted(groups)
        if not keys:
            raise ConfigurationError(
                f"none of the {len(manifest)} objects under {redact_url(manifest.root)} has a "
                "'{key}.{extension}' name, so there are no samples; check the prefix"
            )
        return cls(manifest, keys, [tuple(groups[k]) for k in keys])

    def __len__(self) -> int:
        return len(self.keys)

    def nbytes(self, i: int) -> int:
        """Bytes of sample ``i`` (unknown sizes count as 0)."""
        sizes = self.manifest.sizes
        total = 0
        for _, j in self.fields[i]:  # a loop, not sum() over a generator: called per sample
            size = sizes[j]
            if size > 0:
                total += size
        return total

    def job(
        self, i: int
    ) -> tuple[dict[str, Any], tuple[tuple[str, tuple[str, int, None, int | None]], ...], int]:
        """Sample ``i`` as the fetch loop takes it (:class:`~.fetch_loop.Jobs`): its dict with
        ``__key__`` and ``__url__``, one whole-object request per field (with the object's size
        from the manifest, which bounds its answer), and its bytes."""
        manifest = self.manifest
        root, keys, sizes = manifest.root, manifest.keys, manifest.sizes
        parts = tuple(
            [
                (ext, (root + keys[j], 0, None, sizes[j] if sizes[j] >= 0 else None))
                for ext, j in self.fields[i]
            ]
        )
        return {"__key__": self.keys[i], "__url__": root}, parts, self.nbytes(i)

    def __repr__(self) -> str:
        return f"SampleTable(root={redact_url(self.manifest.root)!r}, samples={len(self.keys)})"
