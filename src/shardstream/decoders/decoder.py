"""The Decoder: runs WebDataset-style handlers over every field of a sample, dispatched by extension.

A handler (a :data:`FieldDecoder`) is ``handler(key, data)`` where ``key`` is the field name with
a leading dot (``".jpg"``, ``".seg.png"``); it returns the decoded value, ``None`` to pass, or
:class:`Continue` to hand a rewritten key and data to the handlers after it (used for ``.gz``).
For each field the first non-``None`` result wins; with no taker the bytes stay as they are.
A handler that needs the rest of the sample (its ``__key__``, to seed per-sample randomness)
defines ``decode_in_sample(key, data, sample)``, which is called instead of ``handler(key, data)``;
one with per-epoch state defines ``bind(ctx)`` (see :meth:`Decoder.bind`).

Dispatch is precomputed. Handlers that declare ``dispatch_extensions`` (a frozenset of last
extension components, as every handler in this package does) are only called for fields whose
last component is in that set; other callables are called for every field. The ordered list of
candidate handlers is built once per field name and cached, so decoding a field costs one dict
lookup plus the handler that takes it.
"""

from __future__ import annotations

import copy
import gzip
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError, DecodingError, UnsafeOperationError, redact_url
from .basic import BasicHandlers, basichandlers
from .deferred import DeferredArray, Defers
from .image import imagehandler

__all__ = [
    "Continue",
    "Decoder",
    "ExtensionHandler",
    "FieldDecoder",
    "call_extension_handler",
    "default_decoder",
    "default_post_handlers",
    "default_pre_handlers",
    "gzfilter",
    "handle_extension",
    "make_decoder",
]

log = logging.getLogger(__name__)

#: A field decoder, ``decoder(".ext", data) -> value | None | Continue`` (WebDataset calls these
#: "handlers"; :data:`shardstream.handlers.Handler` is something else, an error policy).
FieldDecoder = Callable[[str, bytes], Any]
# (position in the handler chain, function, how to call it): _KEYED f(".ext", data), _DIRECT f(data),
# _IN_SAMPLE f(".ext", data, sample).
_Plan = tuple[tuple[int, Callable[..., Any], int], ...]
_KEYED, _DIRECT, _IN_SAMPLE = 0, 1, 2
_MAX_PLANS = 4096  # field names are few in practice; bound the cache against pathological data


class Continue:
    """Returned by a handler to continue decoding with a new key and data (e.g. after gunzip).

    Args:
        key: the rewritten key, with its leading dot (``".json"`` for ``".json.gz"``).
        data: the new bytes.
    """

    __slots__ = ("data", "key")

    def __init__(self, key: str, data: bytes) -> None:
        self.key, self.data = key, data


class _GzFilter:
    """Gunzips ``*.gz`` fields and continues decoding with the inner extension."""

    dispatch_extensions = frozenset({"gz"})

    def __call__(self, key: str, data: bytes) -> Continue | None:
        if not key.endswith(".gz"):
            return None
        return Continue(key[:-3], gzip.decompress(data))

    def __repr__(self) -> str:
        return "gzfilter"


#: WebDataset's ``gzfilter`` pre-handler.
gzfilter = _GzFilter()


def call_extension_handler(
    key: str, data: bytes, f: Callable[[bytes], Any], extensions: Iterable[str]
) -> Any:
    """``f(data)`` if ``key`` ends with one of the dotted ``extensions`` (case-insensitive), else None."""
    parts = key.lower().split(".")
    for target in extensions:
        wanted = target.lower().split(".")
        if len(wanted) <= len(parts) and parts[-len(wanted) :] == wanted:
            return f(data)
    return None


class ExtensionHandler:
    """Calls ``f(data)`` for fields ending in one of ``extensions`` (see :func:`handle_extension`)."""

    def __init__(self, extensions: str | Iterable[str], f: Callable[[bytes], Any]) -> None:
        names = extensions.split() if isinstance(extensions, str) else list(extensions)
        self.extensions = [name.lower() for name in names]
        self.targets = [name.split(".") for name in self.extensions]
        self.dispatch_extensions = frozenset(t[-1] for t in self.targets)
        self.f = f
        # With single-component targets the last component decides, so the Decoder may call f
        # directly; dotted targets ("seg.png") need the whole key.
        single = all(len(t) == 1 for t in self.targets)
        self.dispatch_lookup: Callable[[str], Callable[[bytes], Any] | None] | None = (
            self._lookup if single else None
        )

    def _lookup(self, extension: str) -> Callable[[bytes], Any] | None:
        return self.f if extension in self.dispatch_extensions else None

    def __call__(self, key: str, data: bytes) -> Any:
        parts = key.lower().split(".")
        for wanted in self.targets:
            if len(wanted) <= len(parts) and parts[-len(wanted) :] == wanted:
                return self.f(data)
        return None

    def __repr__(self) -> str:
        return f"handle_extension({' '.join(self.extensions)!r}, {getattr(self.f, '__name__', self.f)!r})"


def handle_extension(extensions: str | Iterable[str], f: Callable[[bytes], Any]) -> ExtensionHandler:
    """A handler calling ``f(data)`` for the given extensions.

    Args:
        extensions: space-separated (or a list); an entry may have dots, e.g. ``"seg.png"`` matches
            only fields ending in ``.seg.png``. Case-insensitive.
        f: bytes -> value.
    """
    return ExtensionHandler(extensions, f)


default_pre_handlers: list[FieldDecoder] = [gzfilter]
default_post_handlers: list[FieldDecoder] = [basichandlers]


def _as_handlers(spec: Any, jpeg_backend: str, what: str) -> list[FieldDecoder]:
    if spec is None:
        return []
    items = [spec] if isinstance(spec, str) or callable(spec) else list(spec)
    handlers: list[FieldDecoder] = []
    for item in items:
        if isinstance(item, str):
            handlers.append(imagehandler(item, jpeg_backend=jpeg_backend))
        elif callable(item):
            handlers.append(item)
        else:
            raise ConfigurationError(
                f"{what} entry {item!r} is neither a handler (a callable taking key and data) nor an "
                "image spec string such as 'pil' or 'rgb8'"
            )
    return handlers


class Decoder:
    """Decodes samples with a list of handlers (drop-in for ``webdataset.autodecode.Decoder``).

    Args:
        handlers: the main handlers: a list of callables and/or image spec strings, or a single
            spec (``Decoder("pil")``) or callable.
        pre: handlers run before ``handlers``. Default ``[gzfilter]``.
        post: handlers run after ``handlers``. Default ``[basichandlers]``.
        only: field names (list or space-separated str) to decode; others pass through.
        partial: leave fields that are not bytes as they are instead of failing.
        allow_pickle: let this decoder unpickle ``pyd``/``pickle``/``pkl`` fields and load ``.pth``
            without ``weights_only``. Runs code from the data; default False.
        jpeg_backend: for image specs given as strings: ``"auto"``, ``"pillow"``,
            ``"simplejpeg"`` or ``"turbojpeg"``.
    """

    def __init__(
        self,
        handlers: Any,
        pre: Iterable[FieldDecoder] | None = None,
        post: Iterable[FieldDecoder] | None = None,
        only: str | Iterable[str] | None = None,
        partial: bool = False,
        *,
        allow_pickle: bool = False,
        jpeg_backend: str = "auto",
    ) -> None:
        chain = (
            _as_handlers(default_pre_handlers if pre is None else pre, jpeg_backend, "pre")
            + _as_handlers(handlers, jpeg_backend, "handlers")
            + _as_handlers(default_post_handlers if post is None else post, jpeg_backend, "post")
        )
        if allow_pickle:
            chain = [BasicHandlers(allow_pickle=True) if isinstance(h, BasicHandlers) else h for h in chain]
        self.handlers: tuple[FieldDecoder, ...] = tuple(chain)
        self.only = frozenset(only.split() if isinstance(only, str) else only) if only is not None else None
        self.partial = partial
        self.allow_pickle = allow_pickle
        self._filters: tuple[frozenset[str] | None, ...] = tuple(
            getattr(h, "dispatch_extensions", None) for h in self.handlers
        )
        self._plans: dict[str, _Plan] = {}
        self._defers = False  # some handler returns DeferredArray values (see deferring())

    def _plan(self, field: str) -> _Plan:
        plan = self._plans.get(field)
        if plan is None:
            plan = self._build_plan(field.rpartition(".")[2].lower())
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            self._plans[field] = plan
        return plan

    def _build_plan(self, extension: str) -> _Plan:
        steps: list[tuple[int, Callable[..., Any], int]] = []
        for i, (handler, accepted) in enumerate(zip(self.handlers, self._filters, strict=True)):
            if accepted is not None and extension not in accepted:
                continue
            in_sample = getattr(handler, "decode_in_sample", None)
            if in_sample is not None:
                steps.append((i, in_sample, _IN_SAMPLE))
                continue
            # A handler with dispatch_lookup promises handler(key, data) == loader(data) for every
            # key whose last component is `extension`, so the plan can call the loader directly.
            lookup = getattr(handler, "dispatch_lookup", None)
            if lookup is None:
                steps.append((i, handler, _KEYED))
                continue
            loader = lookup(extension)
            if loader is not None:
                steps.append((i, loader, _DIRECT))
        return tuple(steps)

    def decode1(self, key: str, data: bytes, sample: Mapping[str, Any] | None = None) -> Any:
        """Decode one field's bytes; ``key`` is the field name without the leading dot, ``sample``
        the sample it belongs to (for handlers with ``decode_in_sample``; default: none)."""
        plan = self._plan(key)
        start = 0
        while True:
            for index, function, mode in plan:
                if index < start:
                    continue
                if mode == _DIRECT:
                    result = function(data)
                elif mode == _KEYED:
                    result = function("." + key, data)
                else:
                    result = function("." + key, data, {} if sample is None else sample)
                if result is None:
                    continue
                if isinstance(result, Continue):
                    key, data = result.key[1:], result.data
                    plan, start = self._plan(key), index + 1
                    break
                return result
            else:
                return data

    def decode(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """Decode every field of ``sample``; ``__*__`` metadata fields are only UTF-8-decoded."""
        result: dict[str, Any] = {}
        only, partial = self.only, self.partial
        for k, v in sample.items():
            if k.startswith("__"):
                if isinstance(v, bytes):
                    try:
                        v = v.decode("utf-8")
                    except UnicodeDecodeError:
                        log.warning("metadata field %r is not UTF-8; kept as bytes", k)
                result[k] = v
                continue
            if only is not None and k not in only:
                result[k] = v
                continue
            if isinstance(v, (memoryview, bytearray)):
                v = bytes(v)
            if not isinstance(v, bytes):
                if partial:
                    result[k] = v
                    continue
                raise self._error(sample, k, None, f"the value is a {type(v).__name__}, not bytes")
            try:
                value = result[k] = self.decode1(k, v, sample)
                if self._defers and type(value) is DeferredArray:
                    value.locate(sample.get("__url__"), sample.get("__key__"), k)
            except (UnsafeOperationError, ImportError) as exc:
                # Policy and installation problems keep their type: retrying or skipping won't fix them.
                if isinstance(exc, UnsafeOperationError):
                    raise UnsafeOperationError(f"{self._where(sample, k)}: {exc}") from exc
                raise
            except Exception as exc:
                raise self._error(sample, k, exc, f"{type(exc).__name__}: {exc}") from exc
        return result

    @staticmethod
    def _where(sample: Mapping[str, Any], field: str) -> str:
        url = sample.get("__url__")
        source = f" of {redact_url(url)}" if url is not None else ""
        return f"field {field!r} of sample {sample.get('__key__')!r}{source}"

    def _error(
        self, sample: Mapping[str, Any], field: str, exc: Exception | None, reason: str
    ) -> DecodingError:
        if exc is None:
            fix = "it was probably decoded already; pass partial=True to leave non-bytes fields alone"
        elif "DecompressionBomb" in type(exc).__name__:  # Pillow's limit, on every decoding path
            fix = (
                "if images this large are expected, raise PIL.Image.MAX_IMAGE_PIXELS (None disables "
                "the check); otherwise use handler=warn_and_continue to skip them"
            )
        else:
            fix = (
                "check that the extension matches the content (or pass only=/a handler for it), or "
                "use handler=warn_and_continue to skip bad samples"
            )
        error = DecodingError(
            f"cannot decode {self._where(sample, field)} (extension {field!r}): {reason.rstrip('.')}. "
            f"Fix: {fix}.",
            url=sample.get("__url__"),
            key=sample.get("__key__"),
            extension=field,
        )
        return error

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """Decode a sample (a dict); see :meth:`decode`."""
        if type(sample) is not dict and not isinstance(sample, Mapping):  # the ABC check is the slow part
            raise ConfigurationError(
                f"Decoder got a {type(sample).__name__}, not a dict sample; decode() must come before "
                "to_tuple()/batched() in the pipeline"
            )
        return self.decode(sample)

    def bind(self, ctx: Any) -> Decoder:
        """This decoder for one epoch: a copy whose handlers that have ``bind(ctx)`` are bound.

        The decode stage calls it once per epoch with its run context (``epoch``, ``seed``,
        ``world``), so handlers with random draws (``VideoClips``, ``AudioWindows``) make them a
        pure function of (seed, epoch, sample). Without such handlers it returns ``self``.
        """
        if not any(hasattr(h, "bind") for h in self.handlers):
            return self
        return self._with_handlers(tuple(h.bind(ctx) if hasattr(h, "bind") else h for h in self.handlers))

    def _with_handlers(self, handlers: tuple[FieldDecoder, ...]) -> Decoder:
        """A copy of this decoder with ``handlers`` in place of its own (dispatch rebuilt)."""
        copied = copy.copy(self)
        copied.handlers = handlers
        copied._filters = tuple(getattr(h, "dispatch_extensions", None) for h in handlers)
        copied._plans = {}
        return copied

    def deferring(self) -> Decoder:
        """A copy whose image handlers return JPEGs as :class:`~.deferred.DeferredArray` values,
        decoded later straight into the batch (``deferred.py``); ``self`` when none can."""
        handlers = tuple(h.deferring() if isinstance(h, Defers) else h for h in self.handlers)
        if all(new is old for new, old in zip(handlers, self.handlers, strict=True)):
            return self
        deferring = self._with_handlers(handlers)
        deferring._defers = True
        return deferring

    def __repr__(self) -> str:
        return f"Decoder({list(self.handlers)!r}, only={self.only}, partial={self.partial})"


def make_decoder(*args: Any, handler: Any = None, allow_pickle: bool = False, **kw: Any) -> Decoder:
    """Build the Decoder for ``decode(*args, **kw)``.

    Args:
        *args: image spec strings (``"pil"``, ``"rgb8"``...) and handler callables, in order.
        handler: the pipeline's error handler; accepted for signature compatibility and ignored
            here (the decode stage applies it).
        allow_pickle: see :class:`Decoder`.
        **kw: ``pre``, ``post``, ``only``, ``partial``, ``jpeg_backend`` (see :class:`Decoder`).
    """
    del handler
    return Decoder(list(args), allow_pickle=allow_pickle, **kw)


#: WebDataset's ``default_decoder``: the default pre and post handlers only.
default_decoder = Decoder([])
