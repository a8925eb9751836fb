"""Per-extension decoding: the extension registry, the Decoder and WebDataset-compatible handlers.

The registry maps a field's last extension component (``"cls"``, ``"npy"``) to a function
``bytes -> value``; :data:`basichandlers` (the Decoder's default post-handler) decodes through it,
so :func:`register_decoder` teaches every default Decoder a new extension. Entries may be given as
``"module:function"`` strings, imported on first use, so optional backends cost nothing until a
field needs them and fail with an install hint if missing. Images are decoded by spec rather than
by extension alone (see :mod:`.image`); video and audio by explicit handlers on PyAV: whole
files with ``torch_video``/``torch_audio``, metadata with ``video_info``, and seeking clips and
windows with :class:`VideoClips`/:class:`AudioWindows`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ConfigurationError, DecodingError

__all__ = [
    "AUDIO_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "AudioWindows",
    "BasicHandlers",
    "Continue",
    "Decoder",
    "DecodingError",
    "ExtensionHandler",
    "FieldDecoder",
    "ImageHandler",
    "VideoClips",
    "basichandlers",
    "call_extension_handler",
    "default_decoder",
    "default_post_handlers",
    "default_pre_handlers",
    "get_decoder",
    "gzfilter",
    "handle_extension",
    "imagehandler",
    "imagespecs",
    "make_decoder",
    "register_decoder",
    "registered_extensions",
    "torch_audio",
    "torch_loads",
    "torch_video",
    "unregister_decoder",
    "video_info",
]

Loader = Callable[[bytes], Any]

_B = "shardstream.decoders.basic:"
# extension -> loader or "module:function" (resolved on first use)
_REGISTRY: dict[str, Loader | str] = {}
_lock = threading.Lock()


def register_decoder(extensions: str | Iterable[str], decoder: Loader | str) -> None:
    """Decode fields whose last extension component is in ``extensions`` with ``decoder``.

    Affects Decoders created afterwards (each Decoder fixes its dispatch table when built).

    Args:
        extensions: space-separated string or list, case-insensitive (``"cls label"``).
        decoder: ``bytes -> value``, or ``"module:function"`` to import lazily.
    """
    names = extensions.split() if isinstance(extensions, str) else list(extensions)
    if not callable(decoder) and not (isinstance(decoder, str) and ":" in decoder):
        raise ConfigurationError(f"decoder={decoder!r} must be a callable or a 'module:function' string")
    with _lock:
        for name in names:
            _REGISTRY[name.lower().lstrip(".")] = decoder


def unregister_decoder(extensions: str | Iterable[str]) -> None:
    """Remove registry entries (unknown extensions are ignored)."""
    names = extensions.split() if isinstance(extensions, str) else list(extensions)
    with _lock:
        for name in names:
            _REGISTRY.pop(name.lower().lstrip("."), None)


def get_decoder(extension: str) -> Loader | None:
    """The loader registered for a last extension component (lower-case), or ``None``."""
    entry = _REGISTRY.get(extension)
    if entry is None or callable(entry):
        return entry
    module_name, _, attr = entry.partition(":")
    loader: Loader = getattr(importlib.import_module(module_name), attr)
    with _lock:
        if _REGISTRY.get(extension) == entry:
            _REGISTRY[extension] = loader
    return loader


def registered_extensions() -> frozenset[str]:
    """Every extension in the registry."""
    return frozenset(_REGISTRY)


for _names, _target in (
    ("txt text transcript", "text_loads"),
    ("cls cls2 index inx id", "int_loads"),
    ("json jsn", "json_loads"),
    ("pyd pickle pkl", "unpickle_loads"),
    ("pth", "torch_loads"),
    ("ten tb", "tenbin_loads"),
    ("mp msgpack msg", "msgpack_loads"),
    ("npy", "npy_loads"),
    ("npz", "npz_loads"),
    ("cbor", "cbor_loads"),
):
    register_decoder(_names, _B + _target)

# Imported after the registry exists: basic.py looks it up at call time.
from .audio import AUDIO_EXTENSIONS, AudioWindows, torch_audio  # noqa: E402
from .basic import BasicHandlers, basichandlers, torch_loads  # noqa: E402
from .clips import VideoClips  # noqa: E402
from .decoder import (  # noqa: E402
    Continue,
    Decoder,
    ExtensionHandler,
    FieldDecoder,
    call_extension_handler,
    default_decoder,
    default_post_handlers,
    default_pre_handlers,
    gzfilter,
    handle_extension,
    make_decoder,
)
from .image import IMAGE_EXTENSIONS, ImageHandler, imagehandler, imagespecs  # noqa: E402
from .video import VIDEO_EXTENSIONS, torch_video, video_info  # noqa: E402
