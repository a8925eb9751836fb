"""Field selection stages for dict samples: to_tuple, rename, extract_keys, rename_keys.

A field a stage names but a sample lacks raises :class:`~shardstream.errors.MissingFieldError`,
which is both the ``ValueError`` WebDataset 1.0.2 raises and a ``KeyError``; the stage's error
policy (``handler=``) decides what happens next, as in WebDataset. ``extract_keys`` and
``rename_keys`` have no ``handler`` in WebDataset and always raise.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import MissingFieldError
from ..handlers import Handler, reraise_exception
from .base import MapStage, RunContext, Stage

__all__ = ["Rename", "ToTuple", "extract_keys", "getfirst", "rename", "rename_keys", "to_tuple"]


def _alternatives(spec: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(spec, str):
        if " " in spec:
            raise ValueError(f"field spec {spec!r} contains a space; separate alternatives with ';'")
        return tuple(spec.split(";"))
    return tuple(spec)


def _fields_of(sample: Any) -> list[str]:
    return sorted(k for k in sample if not str(k).startswith("__")) if isinstance(sample, dict) else []


def _key_of(sample: Any) -> Any:
    return sample.get("__key__") if isinstance(sample, dict) else None


def getfirst(
    a: dict[str, Any], keys: str | Sequence[str], default: Any = None, missing_is_error: bool = True
) -> Any:
    """Value of the first of ``keys`` (a list or ``"jpg;png"``) present in ``a``.

    Raises:
        MissingFieldError: (a KeyError and a ValueError) when none is present and
            ``missing_is_error`` (else ``default`` is returned).
    """
    names = _alternatives(keys)
    for k in names:
        if k in a:
            return a[k]
    if missing_is_error:
        raise MissingFieldError(
            f"none of the fields {list(names)} is in sample {_key_of(a)!r} (it has {_fields_of(a)}); "
            "check the extensions in the shards, or pass missing_is_error=False"
        )
    return default


class ToTuple(MapStage):
    """Turn dict samples into tuples of the named fields (``"jpg;png"`` picks the first present)."""

    kind = "fields"
    label = "to_tuple"
    passes_values = True

    def __init__(
        self,
        *fields: str,
        handler: Handler = reraise_exception,
        missing_is_error: bool = True,
        none_is_error: bool | None = None,
    ) -> None:
        if len(fields) == 1 and " " in fields[0]:
            fields = tuple(fields[0].split())
        self.fields = [_alternatives(f) for f in fields]
        self.handler = handler
        self.missing_is_error = missing_is_error
        self.none_is_error = missing_is_error if none_is_error is None else none_is_error

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        fields, missing_is_error, none_is_error = self.fields, self.missing_is_error, self.none_is_error
        simple = all(len(f) == 1 for f in fields)
        names = [f[0] for f in fields]

        def apply(sample: Any) -> Any:
            if simple:
                # Fast path: one name per field; a KeyError falls back to the full lookup for
                # a message that names what the sample does contain.
                try:
                    result = tuple([sample[n] for n in names])
                except KeyError:
                    result = tuple(getfirst(sample, f, None, missing_is_error) for f in fields)
            else:
                result = tuple(getfirst(sample, f, None, missing_is_error) for f in fields)
            # Identity test: "None in result" would call __eq__ on numpy arrays and fail. A plain
            # loop: any() over a generator costs more per sample.
            if none_is_error:
                for x in result:
                    if x is None:
                        raise ValueError(f"to_tuple{tuple(names)} found None in sample {_key_of(sample)!r}")
            return result

        return apply


def to_tuple(
    *fields: str,
    handler: Handler = reraise_exception,
    missing_is_error: bool = True,
    none_is_error: bool | None = None,
) -> ToTuple:
    return ToTuple(*fields, handler=handler, missing_is_error=missing_is_error, none_is_error=none_is_error)


class Rename(MapStage):
    """Rename fields: ``rename(image="jpg;png", label="cls")``; ``keep=False`` drops the rest."""

    kind = "fields"
    label = "rename"
    passes_values = True

    def __init__(self, handler: Handler = reraise_exception, keep: bool = True, **kw: str) -> None:
        self.handler = handler
        self.keep = keep
        self.mapping = {new: _alternatives(old) for new, old in kw.items()}
        self.replaced = {old for olds in self.mapping.values() for old in olds}

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        mapping, keep, replaced = self.mapping, self.keep, self.replaced

        def apply(sample: Any) -> Any:
            renamed = {new: getfirst(sample, olds) for new, olds in mapping.items()}
            if not keep:
                return renamed
            result = {k: v for k, v in sample.items() if k not in replaced}
            result.update(renamed)
            return result

        return apply


def rename(handler: Handler = reraise_exception, keep: bool = True, **kw: str) -> Rename:
    return Rename(handler, keep, **kw)


def _glob(pattern: str) -> Callable[[str], Any]:
    return re.compile(fnmatch.translate(pattern)).match


class _ExtractKeys(MapStage):
    """WebDataset's rule: a field matches a pattern (``"*.jpg"``, ``"cls"``, ``"jpg;png"``) when
    the pattern matches the field name or ``"." + name``; a pattern without a match is an error,
    or left out of the tuple with ``ignore_missing``."""

    passes_values = True

    def __init__(self, *patterns: str, duplicate_is_error: bool = True, ignore_missing: bool = False) -> None:
        self.patterns = patterns
        self.duplicate_is_error = duplicate_is_error
        self.ignore_missing = ignore_missing
        self.handler = reraise_exception

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        rules = [
            (p, [_glob(alt) for alt in (p.split(";") if isinstance(p, str) else p)]) for p in self.patterns
        ]
        duplicate_is_error, ignore_missing = self.duplicate_is_error, self.ignore_missing

        def apply(sample: Any) -> Any:
            result: list[Any] = []
            for pattern, matchers in rules:
                matches = [k for k in sample if any(m("." + k) or m(k) for m in matchers)]
                if not matches:
                    if ignore_missing:
                        continue
                    raise MissingFieldError(
                        f"no field of sample {_key_of(sample)!r} matches {pattern!r} (it has "
                        f"{_fields_of(sample)}); pass ignore_missing=True to leave it out"
                    )
                if len(matches) > 1 and duplicate_is_error:
                    raise ValueError(
                        f"fields {matches} of sample {_key_of(sample)!r} all match {pattern!r}; "
                        "make the pattern specific or pass duplicate_is_error=False (the first is used)"
                    )
                result.append(sample[matches[0]])
            return tuple(result)

        return apply


def extract_keys(*patterns: str, duplicate_is_error: bool = True, ignore_missing: bool = False) -> Stage:
    """Tuples of the fields matching each glob pattern (``extract_keys("*.jpg", "cls")``)."""
    return _ExtractKeys(*patterns, duplicate_is_error=duplicate_is_error, ignore_missing=ignore_missing)


class _RenameKeys(MapStage):
    """WebDataset's rule: each field's basename, lower-cased, is matched against the patterns,
    the last rule first; unmatched fields (``__key__`` included) are dropped unless
    ``keep_unselected``; a second field for one new name is an error or dropped."""

    passes_values = True

    def __init__(
        self,
        *args: tuple[str, str],
        keep_unselected: bool = False,
        must_match: bool = True,
        duplicate_is_error: bool = True,
        **kw: str,
    ) -> None:
        self.rules = [(pattern, new) for new, pattern in [*args, *kw.items()]]
        self.keep_unselected = keep_unselected
        self.must_match = must_match
        self.duplicate_is_error = duplicate_is_error
        self.handler = reraise_exception

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        rules = [(pattern, _glob(pattern), new) for pattern, new in reversed(self.rules)]
        keep_unselected, must_match = self.keep_unselected, self.must_match
        duplicate_is_error = self.duplicate_is_error
        patterns = [pattern for pattern, _ in self.rules]

        def apply(sample: Any) -> Any:
            out: dict[str, Any] = {}
            matched: set[str] = set()
            for path, value in sample.items():
                fname = path.rpartition("/")[2].lower()
                new = None
                for pattern, match, name in rules:
                    if match(fname):
                        matched.add(pattern)
                        new = name
                        break
                if new is None:
                    if keep_unselected:
                        out[path] = value
                    continue
                if new in out:
                    if duplicate_is_error:
                        raise ValueError(
                            f"rename_keys: two fields of sample {_key_of(sample)!r} become {new!r}; "
                            "make the patterns specific or pass duplicate_is_error=False (the first is kept)"
                        )
                    continue
                out[new] = value
            if must_match and len(matched) < len(set(patterns)):
                missing = [p for p in patterns if p not in matched]
                raise MissingFieldError(
                    f"rename_keys: no field of sample {_key_of(sample)!r} matches {missing} (it has "
                    f"{_fields_of(sample)}); pass must_match=False to allow that"
                )
            return out

        return apply


def rename_keys(
    *args: tuple[str, str],
    keep_unselected: bool = False,
    must_match: bool = True,
    duplicate_is_error: bool = True,
    **kw: str,
) -> Stage:
    """Rename fields by glob patterns: ``rename_keys(image="*.jpg")``."""
    return _RenameKeys(
        *args,
        keep_unselected=keep_unselected,
        must_match=must_match,
        duplicate_is_error=duplicate_is_error,
        **kw,
    )
