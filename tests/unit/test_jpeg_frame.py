"""The hand-written JPEG frame-header walk (``decoders/_jpeg.scan_frame``) against libjpeg-turbo's
own header read (simplejpeg), and the decode path that uses it."""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np
import PIL.Image
import pytest
from _components import require_module

from shardstream.decoders import Decoder
from shardstream.decoders._jpeg import get_into, scan_frame
from shardstream.decoders.deferred import DeferredArray

simplejpeg = require_module("simplejpeg", "JPEG decoding with simplejpeg")


def _image(h: int, w: int, channels: int = 3) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(h * 1000 + w)
    base = rng.integers(0, 256, (max(1, h // 4), max(1, w // 4), channels), dtype=np.uint8)
    big = base.repeat(4, 0).repeat(4, 1)[:h, :w]
    return np.ascontiguousarray(big[..., 0] if channels == 1 else big)


def _jpeg(array: np.ndarray[Any, Any], mode: str | None = None, **options: Any) -> bytes:
    image = PIL.Image.fromarray(array)
    if mode is not None:
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def _exif_with_thumbnail() -> bytes:
    """An APP1 segment whose body holds a whole JPEG (its own SOI and SOF): the walk must jump it."""
    thumb = _jpeg(_image(8, 8), quality=50)
    body = b"Exif\x00\x00" + b"II*\x00" + thumb
    return b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body


VARIANTS = {
    "baseline": lambda: _jpeg(_image(64, 80), quality=90),
    "progressive": lambda: _jpeg(_image(64, 80), quality=90, progressive=True),
    "optimized": lambda: _jpeg(_image(33, 17), optimize=True),
    "grey": lambda: _jpeg(_image(40, 24, 1)),
    "444": lambda: _jpeg(_image(31, 45), subsampling=0),
    "422": lambda: _jpeg(_image(31, 45), subsampling=1),
    "one pixel": lambda: _jpeg(_image(1, 1)),
    "wide": lambda: _jpeg(_image(3, 4000)),
    "comment and restart interval": lambda: _jpeg(
        _image(48, 48), comment=b"\xff\xd9 not a marker", restart_marker_rows=1
    ),
    "icc profile": lambda: _jpeg(_image(20, 20), icc_profile=b"\xff\xc0" * 3000),
    "cmyk": lambda: _jpeg(_image(16, 24), mode="CMYK"),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_frame_matches_libjpeg_header(name: str) -> None:
    data = VARIANTS[name]()
    height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    frame = scan_frame(data)
    assert frame is not None
    assert frame[:2] == (height, width)
    assert (frame[2] in (1, 3)) == (colorspace in ("Gray", "YCbCr", "RGB"))


def test_segments_before_the_frame_are_jumped_whole() -> None:
    data = _jpeg(_image(24, 40))
    exif = _exif_with_thumbnail()
    patched = data[:2] + exif + b"\xff\xff\xff" + data[2:]  # and fill bytes before a marker
    assert simplejpeg.decode_jpeg_header(patched)[:2] == (24, 40)
    assert scan_frame(patched) == (24, 40, 3)


def _patch_frame(data: bytes, offset: int, value: bytes) -> bytes:
    at = data.index(b"\xff\xc0") + offset
    return data[:at] + value + data[at + len(value) :]


LEFT_TO_THE_LIBRARY = "truncated,not a marker,scan first,lossless frame,12-bit,height from DNL,short length"


@pytest.mark.parametrize("case", LEFT_TO_THE_LIBRARY.split(","))
def test_what_the_walk_leaves_to_the_library(case: str) -> None:
    data = _jpeg(_image(24, 40))
    sof = data.index(b"\xff\xc0")
    bad = {
        "truncated": data[: sof + 6],
        "not a marker": data[:2] + b"\x00" + data[3:],
        "scan first": data[:2] + b"\xff\xda\x00\x02" + data[2:],
        "lossless frame": _patch_frame(data, 1, b"\xc3"),
        "12-bit": _patch_frame(data, 4, b"\x0c"),
        "height from DNL": _patch_frame(data, 5, b"\x00\x00"),
        "short length": data[:2] + b"\xff\xe0\x00\x01" + data[2:],
    }[case]
    assert scan_frame(bad) is None


def test_the_fast_header_keeps_decisions_and_values() -> None:
    into = get_into("simplejpeg")
    assert into is not None
    for name, make in VARIANTS.items():
        data = make()
        dims = into.header(data)
        if name == "cmyk":
            assert dims is None  # Pillow converts CMYK
            continue
        assert dims == simplejpeg.decode_jpeg_header(data)[:2], name
    # A frame the walk leaves to the library is still read there.
    patched = _patch_frame(VARIANTS["baseline"](), 5, b"\x00\x00")
    assert into.header(patched) is None  # libjpeg refuses a zero height too: Pillow decides


@pytest.mark.parametrize("name", ["baseline", "progressive", "grey", "cmyk", "comment and restart interval"])
def test_deferred_decode_equals_eager(name: str) -> None:
    data = VARIANTS[name]()
    sample = {"__key__": "k", "__url__": "/d/a.tar", "jpg": data}
    eager = Decoder("rgb8")(sample)["jpg"]
    value = Decoder("rgb8").deferring()(sample)["jpg"]
    if name == "cmyk":
        assert not isinstance(value, DeferredArray)  # decoded by Pillow at the stage
        got = value
    else:
        assert isinstance(value, DeferredArray) and value.shape == eager.shape
        got = value.array()
    np.testing.assert_array_equal(got, eager)


@pytest.mark.parametrize("name", ["baseline", "progressive", "icc profile"])
def test_truncated_or_mutated_headers_never_raise_and_agree_with_libjpeg(name: str) -> None:
    data = VARIANTS[name]()
    whole = scan_frame(data)
    for cut in range(0, min(len(data), 8000)):
        assert scan_frame(data[:cut]) in (None, whole)  # a cut header is never misread
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(500):
        bad = bytearray(data)
        for at in rng.integers(2, min(len(bad), 700), size=int(rng.integers(1, 5))):
            bad[at] = int(rng.integers(0, 256))
        frame = scan_frame(bytes(bad))
        if frame is None:
            continue
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(bytes(bad))
        except ValueError:
            continue  # libjpeg refuses it: the decode fails at the fill and Pillow decides
        assert frame[:2] == (height, width)
        checked += 1
    assert checked > 100
