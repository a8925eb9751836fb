"""Tests for shardstream.tenbin, including byte compatibility with webdataset.tenbin."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _components import require_module

from shardstream import tenbin

DTYPES = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip_every_dtype(dtype: str) -> None:
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    (out,) = tenbin.decode_buffer(tenbin.encode_buffer([a]))
    assert out.dtype == a.dtype and out.shape == a.shape and (out == a).all()


def test_shapes_views_and_byte_order() -> None:
    arrays: list[np.ndarray[Any, Any]] = [
        np.array(3.5),  # 0-d
        np.zeros((0, 3), np.uint8),  # empty
        np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not contiguous
        np.arange(5, dtype=">i4"),  # big-endian
        np.ones((1,) * 9, np.int8),  # 9 dimensions, the most allowed
    ]
    out = tenbin.decode_buffer(tenbin.encode_buffer(arrays))
    for got, want in zip(out, arrays, strict=True):
        assert got.shape == want.shape and (got == want).all()
    assert out[3].dtype == np.dtype("int32")


def test_alignment_and_layout() -> None:
    buf = tenbin.encode_buffer([np.arange(3, dtype=np.uint8)])
    # header chunk: 16 + 64 (4 int64 words, padded); data chunk: 16 + 64 (3 bytes, padded)
    assert len(buf) == 160
    assert buf[96:99] == b"\x00\x01\x02" and buf[99:160] == bytes(61)
    assert bytes(buf[:8]) == b"~TenBin~"
    assert tenbin.magic_bytes == b"~TenBin~" and tenbin.unstr64(tenbin.magic) == "~TenBin~"


def test_infos() -> None:
    arrays = [np.zeros(2), np.ones(3)]
    buf = tenbin.encode_buffer(arrays, infos=["img", "label"])
    data, infos = tenbin.decode_buffer(buf, infos=True)
    assert infos == ["img", "label"] and len(data) == 2
    assert len(tenbin.decode_buffer(buf, infos=["img", "label"])) == 2
    with pytest.raises(ValueError, match="'label'.*'other'"):
        tenbin.decode_buffer(buf, infos=["img", "other"])
    with pytest.raises(ValueError, match="one info per array"):
        tenbin.encode_buffer(arrays, infos=["only-one"])
    with pytest.raises(ValueError, match="longer than 8"):
        tenbin.encode_buffer([np.zeros(1)], infos=["ninechars"])


def test_rejections() -> None:
    with pytest.raises(ValueError, match="list"):
        tenbin.encode_buffer(np.zeros(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bool"):
        tenbin.encode_buffer([np.zeros(2, bool)])
    with pytest.raises(ValueError, match="at most 9"):
        tenbin.encode_buffer([np.zeros((1,) * 10)])
    with pytest.raises(ValueError, match="magic"):
        tenbin.decode_buffer(b"x" * 64)
    buf = bytes(tenbin.encode_buffer([np.arange(100, dtype=np.int64)]))
    with pytest.raises(ValueError, match="truncated"):
        tenbin.decode_buffer(buf[:-100])
    with pytest.raises(ValueError, match="64-bit"):
        tenbin.check_acceptable_input_type([np.zeros(1)], allow64=False)
    tenbin.check_acceptable_input_type([np.zeros(1, np.float32)], allow64=False)


def test_stream_and_file_io(tmp_path: Path) -> None:
    arrays = [np.arange(10, dtype=np.int16), np.eye(3, dtype=np.float32)]
    stream = io.BytesIO()
    tenbin.write(stream, arrays, infos=["a", "b"])
    assert stream.getvalue() == bytes(tenbin.encode_buffer(arrays, infos=["a", "b"]))
    stream.seek(0)
    out = tenbin.read(stream)
    assert all((x == y).all() for x, y in zip(out, arrays, strict=True))
    stream.seek(0)
    assert len(tenbin.read(stream, n=1)) == 1
    path = str(tmp_path / "x.ten")
    tenbin.save(path, *arrays)
    assert all((x == y).all() for x, y in zip(tenbin.load(path), arrays, strict=True))
    with pytest.raises(ValueError, match="nocheck=True"):
        tenbin.save(str(tmp_path / "x.bin"), *arrays)
    with pytest.raises(ValueError, match="truncated"):
        tenbin.read(io.BytesIO(stream.getvalue()[:40]))


def test_byte_compatible_with_webdataset() -> None:
    wt = require_module(
        "webdataset.tenbin", "the comparison with WebDataset 1.0.2's tenbin", package="webdataset"
    )
    arrays = [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.arange(7, dtype=np.uint8),
        np.ones((2, 2), np.int64),
    ]
    ours = bytes(tenbin.encode_buffer(arrays, infos=["x", "y", "z"]))
    assert ours == bytes(wt.encode_buffer(arrays, infos=["x", "y", "z"]))
    theirs = wt.decode_buffer(ours)
    assert all((a == b).all() and a.dtype == b.dtype for a, b in zip(theirs, arrays, strict=True))
    assert all(
        (a == b).all()
        for a, b in zip(tenbin.decode_buffer(bytes(wt.encode_buffer(arrays))), arrays, strict=True)
    )
