"""Fast JPEG decoding to NumPy through simplejpeg or PyTurboJPEG, when one is installed.

Both wrap libjpeg-turbo, as Pillow's JPEG plugin does, with the same defaults (accurate integer
DCT, smooth chroma upsampling), so RGB output normally matches Pillow exactly; grayscale output
from a colour JPEG may differ by one level (libjpeg takes the luma channel, Pillow converts RGB
with its own rounding). They skip Pillow's per-image object set-up, which is most of the cost for
small images. Anything they cannot decode (CMYK/YCCK JPEGs, corrupt data, non-JPEG bytes) returns
``None`` and the caller falls back to Pillow.

Decompression bombs: both libraries allocate whatever size the JPEG header declares (a 633-byte
file can claim 65500x65500 pixels, 12 GiB of RGB). So the header's dimensions pass Pillow's own
check first (:func:`check_pixels`): the same limit (``PIL.Image.MAX_IMAGE_PIXELS``, read at each
call), the same rule and the same types as ``Image.open``: ``DecompressionBombError`` above twice
the limit, a ``DecompressionBombWarning`` above it (and the image is decoded, as Pillow does).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from ..errors import DecodingError

__all__ = ["BACKENDS", "JpegDecode", "JpegInto", "check_pixels", "get_backend", "get_into", "scan_frame"]

log = logging.getLogger(__name__)

#: (data, mode in {"l", "rgb", "rgba"}) -> HWC uint8 array (HW for "l"), or None to fall back.
JpegDecode = Callable[[bytes, str], "np.ndarray[Any, Any] | None"]

BACKENDS = ("auto", "pillow", "simplejpeg", "turbojpeg")
_SOI = b"\xff\xd8"
_PLAIN_COLORSPACES = frozenset({"YCbCr", "Gray", "RGB"})
_COLORSPACES = {"l": "GRAY", "rgb": "RGB", "rgba": "RGBA"}
_cache: dict[str, JpegDecode | None] = {}
_into: dict[str, JpegInto | None] = {}
_PILLOW_DEFAULT_MAX_PIXELS = int(1024 * 1024 * 1024 // 4 // 3)  # Image.MAX_IMAGE_PIXELS's default


def _pillow_image() -> ModuleType | None:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


def check_pixels(width: int, height: int, image_module: ModuleType | None = None) -> None:
    """Apply Pillow's decompression-bomb check to dimensions read from an image header.

    Mirrors ``PIL.Image._decompression_bomb_check``: raises ``PIL.Image.DecompressionBombError``
    when ``width * height`` exceeds twice ``PIL.Image.MAX_IMAGE_PIXELS`` and warns with
    ``DecompressionBombWarning`` when it exceeds the limit itself; ``MAX_IMAGE_PIXELS = None``
    disables the check. Without Pillow, its default limit applies and the error is a
    :class:`~shardstream.errors.DecodingError`.

    Args:
        width, height: from the image header.
        image_module: ``PIL.Image`` when the caller has it at hand (default: imported here).
    """
    image = image_module if image_module is not None else _pillow_image()
    limit = image.MAX_IMAGE_PIXELS if image is not None else _PILLOW_DEFAULT_MAX_PIXELS
    if limit is None:
        return
    pixels = max(1, width) * max(1, height)
    if pixels > 2 * limit:
        message = (
            f"Image size ({pixels} pixels) exceeds limit of {2 * limit} pixels, "
            "could be decompression bomb DOS attack."
        )
        raise image.DecompressionBombError(message) if image is not None else DecodingError(message)
    if pixels > limit:
        warnings.warn(
            f"Image size ({pixels} pixels) exceeds limit of {limit} pixels, "
            "could be decompression bomb DOS attack.",
            image.DecompressionBombWarning if image is not None else RuntimeWarning,
            stacklevel=3,
        )


# The frame headers (SOFn) of 8-bit Huffman JPEGs: baseline, extended, progressive.
_HUFFMAN_SOF = frozenset({0xC0, 0xC1, 0xC2})
_SOS, _TEM = 0xDA, 0x01


def scan_frame(data: bytes) -> tuple[int, int, int] | None:
    """``(height, width, components)`` from the frame header of an 8-bit Huffman JPEG, found by
    walking the marker segments after SOI; ``None`` for anything else (another frame type or
    precision, a height left to a DNL marker, a malformed or truncated segment list), which the
    caller leaves to the library.

    Written by hand because the loader's thread mode calls it once per image on the pool: the
    library's header read costs a GIL release and re-acquisition, and under contention that
    round trip cost a measurable share of thread mode's rate (2 threads, 256x256 JPEGs, 2 cores,
    in an A/B run that no results file holds); this walk is a few Python steps per marker that
    keep the GIL.
    """
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte before a marker
            i += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == _TEM:  # standalone markers: no length
            i += 2
            continue
        length = (data[i + 2] << 8) | data[i + 3]
        if length < 2:
            return None
        if marker in _HUFFMAN_SOF:
            if i + 10 > n or length < 8 or data[i + 4] != 8:
                return None
            height = (data[i + 5] << 8) | data[i + 6]
            width = (data[i + 7] << 8) | data[i + 8]
            if height == 0 or width == 0:
                return None
            return height, width, data[i + 9]
        if marker == _SOS or (0xC3 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC)):
            return None  # scan data before a frame header, or another frame type
        i += 2 + length
    return None


def _simplejpeg_header(simplejpeg: ModuleType) -> Callable[[bytes], tuple[int, int] | None]:
    """``(height, width)`` of a JPEG simplejpeg should decode (bomb limit checked), else None."""
    decode_header = simplejpeg.decode_jpeg_header
    image = _pillow_image()

    def header(data: bytes) -> tuple[int, int] | None:
        if data[:2] != _SOI:
            return None
        frame = scan_frame(data)
        if frame is not None:
            height, width, components = frame
            # 1 component is grey, 3 are YCbCr or RGB (libjpeg's reading); 4 are CMYK/YCCK.
            plain = components in (1, 3)
        else:  # what the walk leaves to the library
            try:
                height, width, colorspace, _ = decode_header(data)
            except ValueError as exc:  # corrupt header: Pillow reports it (or decodes what it can)
                log.debug("simplejpeg could not read the header (%s); falling back to Pillow", exc)
                return None
            plain = colorspace in _PLAIN_COLORSPACES
        # CMYK/YCCK colour conversion differs between libraries (Adobe's inverted CMYK): let
        # Pillow handle those so the output never depends on which backend is installed.
        if not plain:
            return None
        check_pixels(width, height, image)  # before decode_jpeg allocates the declared size
        return height, width

    return header


def _simplejpeg() -> JpegDecode | None:
    try:
        import simplejpeg
    except ImportError:
        return None
    decode_jpeg = simplejpeg.decode_jpeg
    header = _simplejpeg_header(simplejpeg)

    def decode(data: bytes, mode: str) -> np.ndarray[Any, Any] | None:
        if header(data) is None:
            return None
        try:
            result: np.ndarray[Any, Any] = decode_jpeg(data, colorspace=_COLORSPACES[mode])
        except ValueError as exc:  # corrupt data, ...
            log.debug("simplejpeg could not decode (%s); falling back to Pillow", exc)
            return None
        return result[:, :, 0] if mode == "l" else result

    return decode


class JpegInto(NamedTuple):
    """A fast path that decodes into given memory (simplejpeg's ``buffer=``), in two halves."""

    #: ``(height, width)`` of a JPEG this path decodes (the bomb limit checked), else ``None``.
    header: Callable[[bytes], tuple[int, int] | None]
    #: Decodes into ``out`` (C-contiguous uint8, ``(H, W, channels)`` or ``(H, W)`` for "l");
    #: ``False`` when the data cannot be decoded this way (the caller falls back to Pillow).
    into: Callable[[bytes, str, np.ndarray[Any, Any]], bool]


def _simplejpeg_into() -> JpegInto | None:
    try:
        import simplejpeg
    except ImportError:
        return None
    decode_jpeg = simplejpeg.decode_jpeg

    def into(data: bytes, mode: str, out: np.ndarray[Any, Any]) -> bool:
        try:
            decode_jpeg(data, colorspace=_COLORSPACES[mode], buffer=out)
        except ValueError as exc:  # corrupt data, ...
            log.debug("simplejpeg could not decode (%s); falling back to Pillow", exc)
            return False
        return True

    return JpegInto(_simplejpeg_header(simplejpeg), into)


def get_into(name: str = "auto") -> JpegInto | None:
    """The fast path that decodes into given memory for ``jpeg_backend=name``, or ``None``
    (Pillow and PyTurboJPEG allocate their own output)."""
    if name not in ("auto", "simplejpeg"):
        return None
    if "into" not in _into:
        _into["into"] = _simplejpeg_into()
    return _into["into"]


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
    image = _pillow_image()

    def decode(data: bytes, mode: str) -> np.ndarray[Any, Any] | None:
        if data[:2] != _SOI:
            return None
        try:
            header = jpeg.decode_header(data)  # (width, height, subsampling, colorspace[, ...])
            width, height, colorspace = header[0], header[1], header[3]
        except (OSError, ValueError) as exc:
            log.debug("PyTurboJPEG could not read the header (%s); falling back to Pillow", exc)
            return None
        if colorspace in cmyk:  # see the simplejpeg note above
            return None
        check_pixels(width, height, image)  # before decode allocates the declared size
        try:
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
