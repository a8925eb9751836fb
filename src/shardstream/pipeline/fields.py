"""Field selection stages for dict samples: to_tuple, rename, extract_keys, rename_keys."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..handlers import Handler, reraise_exception
from .base import MapStage, Stage

__all__ = ["Rename", "ToTuple", "extract_keys", "getfirst", "rename", "rename_keys", "to_tuple"]

_MISSING = object()


def _alternatives(spec: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(spec, str):
        if " " in spec:
            raise ValueError(f"field spec {spec!r} contains a space; separate alternatives with ';'")
        return tuple(spec.split(";"))
    return tuple(spec)


def getfirst(
    a: dict[str, Any], keys: str | Sequence[str], default: Any = None, missing_is_error: bool = True
) -> Any:
    """Value of the first of ``keys`` (a list or ``"jpg;png"``) present in ``a``."""
    for k in _alternatives(keys):
        if k in a:
            return a[k]
    if missing_is_error:
        raise KeyError(
            f"none of the fields {list(_alternatives(keys))} is in sample {a.get('__key__')!r} "
            f"(it has {sorted(k for k in a if not k.startswith('__'))}); check the extensions in the shards"
        )
    return default


class ToTuple(MapStage):
    """Turn dict samples into tuples of the named fields (``"jpg;png"`` picks the first present)."""

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

    def function(self) -> Callable[[Any], Any]:
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
            # Identity test: "None in result" would call __eq__ on numpy arrays and fail.
            if none_is_error and any(x is None for x in result):
                raise ValueError(f"to_tuple{tuple(names)} found None in sample {sample.get('__key__')!r}")
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

    def __init__(self, handler: Handler = reraise_exception, keep: bool = True, **kw: str) -> None:
        self.handler = handler
        self.keep = keep
        self.mapping = {new: _alternatives(old) for new, old in kw.items()}
        self.replaced = {old for olds in self.mapping.values() for old in olds}

    def function(self) -> Callable[[Any], Any]:
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


class _ExtractKeys(MapStage):
    def __init__(self, *patterns: str, duplicate_is_error: bool = True, ignore_missing: bool = False) -> None:
        self.patterns = patterns
        self.duplicate_is_error = duplicate_is_error
        self.ignore_missing = ignore_missing
        self.handler = reraise_exception

    def function(self) -> Callable[[Any], Any]:
        return self._extract

    def _extract(self, sample: Any) -> Any:
        result: list[Any] = []
        for pattern in self.patterns:
            matches = [v for k, v in sample.items() if fnmatch.fnmatch("." + k, "*." + pattern)]
            if not matches:
                if self.ignore_missing:
                    result.append(None)
                    continue
                raise KeyError(f"no field of sample {sample.get('__key__')!r} matches {pattern!r}")
            if len(matches) > 1 and self.duplicate_is_error:
                raise ValueError(f"several fields of sample {sample.get('__key__')!r} match {pattern!r}")
            result.append(matches[0])
        return tuple(result)


def extract_keys(*patterns: str, duplicate_is_error: bool = True, ignore_missing: bool = False) -> Stage:
    """Tuples of the fields matching each glob pattern (``extract_keys("*.jpg", "cls")``)."""
    return _ExtractKeys(*patterns, duplicate_is_error=duplicate_is_error, ignore_missing=ignore_missing)


class _RenameKeys(MapStage):
    def __init__(
        self,
        *args: tuple[str, str],
        keep_unselected: bool = False,
        must_match: bool = True,
        duplicate_is_error: bool = True,
        **kw: str,
    ) -> None:
        self.rules = [(new, re.compile(fnmatch.translate(pat))) for new, pat in [*args, *kw.items()]]
        self.keep_unselected = keep_unselected
        self.must_match = must_match
        self.duplicate_is_error = duplicate_is_error
        self.handler = reraise_exception

    def function(self) -> Callable[[Any], Any]:
        return self._rename

    def _rename(self, sample: Any) -> Any:
        out: dict[str, Any] = {}
        matched: set[str] = set()
        for key, value in sample.items():
            for new, pat in self.rules:
                if pat.match(key):
                    if new in out and self.duplicate_is_error:
                        raise ValueError(
                            f"rename_keys: two fields map to {new!r} in {sample.get('__key__')!r}"
                        )
                    out[new] = value
                    matched.add(new)
                    break
            else:
                if self.keep_unselected or key.startswith("__"):
                    out[key] = value
        if self.must_match and len(matched) < len(self.rules):
            missing = [new for new, _ in self.rules if new not in matched]
            raise KeyError(f"rename_keys: no field for {missing} in sample {sample.get('__key__')!r}")
        return out


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
