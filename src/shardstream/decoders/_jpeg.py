"""Fast JPEG decoding to NumPy through simplejpeg or PyTurboJPEG, when one is installed.

Both wrap libjpeg-turbo, as Pillow's JPEG plugin does, with the same defaults (accurate integer
DCT, smooth chroma upsampling), so RGB output normally matches Pillow exactly; grayscale output
from a colour JPEG may differ by one level (libjpeg takes the luma channel, Pillow converts RGB
with its own rounding). They skip Pillow's per-image object set-up, which is most of the cost for
small images. Anything they cannot decode (CMYK/YCCK JPEGs, corrupt data, non-JPEG bytes) returns
``None`` and the caller falls back to Pillow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BACKENDS", "JpegDecode", "get_backend"]

log = logging.getLogger(__name__)

#: (data, mode in {"l", "rgb", "rgba"}) -> HWC uint8 array (HW for "l"), or None to fall back.
JpegDecode = Callable[[bytes, str], "np.ndarray[Any, Any] | None"]

BACKENDS = ("auto", "pillow", "simplejpeg", "turbojpeg")
_SOI = b"\xff\xd8"
_PLAIN_COLORSPACES = frozenset({"YCbCr", "Gray", "RGB"})
_cache: dict[str, JpegDecode | None] = {}


def _simplejpeg() -> JpegDecode | None:
    try:
        import simplejpeg
    except ImportError:
        return None
    colorspaces = {"l": "GRAY", "rgb": "RGB", "rgba": "RGBA"}
    decode_jpeg = simplejpeg.decode_jpeg
    decode_header = simplejpeg.decode_jpeg_header

    def decode(data: bytes, mode: str) -> np.ndarray[Any, Any] | None:
        if data[:2] != _SOI:
            return None
        try:
            # CMYK/YCCK colour conversion differs between libraries (Adobe's inverted CMYK): let
            # Pillow handle those so the output never depends on which backend is installed.
            if decode_header(data)[2] not in _PLAIN_COLORSPACES:
                return None
            result: np.ndarray[Any, Any] = decode_jpeg(data, colorspace=colorspaces[mode])
        except ValueError as exc:  # unsupported colour space, corrupt data, ...
            log.debug("simplejpeg could not decode (%s); falling back to Pillow", exc)
            return None
        return result[:, :, 0] if mode == "l" else result

    return decode


def _turbojpeg() -> JpegDecode | None:
    try:
        import turbojpeg
    except ImportError:
        return None
    try:
        jpeg = turbojpeg.TurboJPEG()
    except (RuntimeError, OSError) as exc:  # the Python package is there, libturbojpeg is not
        log.debug("PyTurboJPEG is installed but unusable: %s", exc)
        return None
    formats = {"l": turbojpeg.TJPF_GRAY, "rgb": turbojpeg.TJPF_RGB, "rgba": turbojpeg.TJPF_RGBA}
    cmyk = frozenset({turbojpeg.TJCS_CMYK, turbojpeg.TJCS_YCCK})

    def decode(data: bytes, mode: str) -> np.ndarray[Any, Any] | None:
        if data[:2] != _SOI:
            return None
        try:
            if jpeg.decode_header(data)[3] in cmyk:  # see the simplejpeg note above
                return None
            result: np.ndarray[Any, Any] = jpeg.decode(data, pixel_format=formats[mode])
        except (OSError, ValueError) as exc:
            log.debug("PyTurboJPEG could not decode (%s); falling back to Pillow", exc)
            return None
        return result[:, :, 0] if mode == "l" and result.ndim == 3 else result

    return decode


def get_backend(name: str = "auto") -> JpegDecode | None:
    """The fast decoder called ``name``, or ``None`` for ``"pillow"``/none available.

    ``"auto"`` prefers simplejpeg, then PyTurboJPEG. Naming an uninstalled backend raises
    ImportError with an install hint.
    """
    if name not in BACKENDS:
        from ..errors import ConfigurationError

        raise ConfigurationError(f"jpeg_backend={name!r} is unknown; use one of {', '.join(BACKENDS)}")
    if name == "pillow":
        return None
    if name not in _cache:
        if name == "auto":
            _cache[name] = _simplejpeg() or _turbojpeg()
        else:
            _cache[name] = _simplejpeg() if name == "simplejpeg" else _turbojpeg()
            if _cache[name] is None:
                hint = (
                    "pip install simplejpeg"
                    if name == "simplejpeg"
                    else "pip install PyTurboJPEG plus libturbojpeg"
                )
                raise ImportError(f"jpeg_backend={name!r} is not usable here: {hint}")
    return _cache[name]
