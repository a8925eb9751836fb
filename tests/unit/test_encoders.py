"""Tests for shardstream.tar.encoders: round trips through our Decoder, and edge cases."""

from __future__ import annotations

import gzip
import io
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch
from _components import require_module

from shardstream.decoders import Decoder
from shardstream.errors import ConfigurationError, UnsafeOperationError
from shardstream.tar.encoders import (
    default_handlers,
    encode_based_on_extension,
    encode_based_on_extension1,
    imageencoder,
    make_encoder,
    make_handlers,
    numpy_dumps,
    tenbin_dumps,
    torch_dumps,
)
from shardstream.tar.writer import TarWriter


def _image(h: int = 24, w: int = 40) -> np.ndarray[Any, Any]:
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // w, y * 255 // h, np.full_like(x, 128)], axis=2).astype(np.uint8)


def _roundtrip(field: str, value: Any, *, spec: str = "rgb8", allow_pickle: bool = False) -> Any:
    encoded = make_encoder(True, allow_pickle=allow_pickle)({"__key__": "k", field: value})
    raw = encoded[field]
    assert isinstance(raw, (bytes, bytearray, memoryview))
    raw = bytes(raw)
    return Decoder([spec], allow_pickle=allow_pickle)({"__key__": "k", field: raw})[field]


@pytest.mark.parametrize("ext", ["cls", "cls2", "index", "inx", "id"])
def test_int_roundtrip(ext: str) -> None:
    assert _roundtrip(ext, 12345) == 12345


@pytest.mark.parametrize("ext", ["txt", "text", "transcript"])
def test_text_roundtrip(ext: str) -> None:
    assert _roundtrip(ext, "héllo wörld ✓") == "héllo wörld ✓"


@pytest.mark.parametrize("ext", ["json", "jsn"])
def test_json_roundtrip(ext: str) -> None:
    value = {"a": [1, 2.5, None, "x"], "b": {"c": True}}
    assert _roundtrip(ext, value) == value


@pytest.mark.parametrize("ext", ["mp", "msgpack", "msg"])
def test_msgpack_roundtrip(ext: str) -> None:
    require_module("msgpack", "msgpack encoding")
    value = {"a": [1, 2], "b": b"\x00bytes"}
    assert _roundtrip(ext, value) == value


@pytest.mark.parametrize("dtype", ["uint8", "int64", "float32", "float16", "bool"])
def test_npy_roundtrip(dtype: str) -> None:
    value = (np.arange(24).reshape(2, 3, 4) % 2).astype(dtype)
    out = _roundtrip("npy", value)
    assert out.dtype == value.dtype and (out == value).all()


def test_npz_roundtrip() -> None:
    value = {"a": np.arange(5), "b": np.ones((2, 2), np.float32)}
    out = _roundtrip("npz", value)
    assert out.keys() == value.keys() and all((out[k] == value[k]).all() for k in value)


def test_pth_roundtrip() -> None:
    value: dict[str, Any] = {"w": torch.randn(3, 2), "step": 7}
    out = _roundtrip("pth", value)
    assert torch.equal(out["w"], value["w"]) and out["step"] == 7


@pytest.mark.parametrize("ext", ["ten", "tb"])
def test_tenbin_roundtrip(ext: str) -> None:
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], np.uint32)]
    out = _roundtrip(ext, arrays)
    assert len(out) == 2 and all(
        (a == b).all() and a.dtype == b.dtype for a, b in zip(out, arrays, strict=True)
    )
    single = _roundtrip(ext, np.ones(3, np.int16))
    assert len(single) == 1 and single[0].dtype == np.int16


@pytest.mark.parametrize("ext", ["pyd", "pickle"])
def test_pickle_roundtrip_needs_opt_in_on_both_sides(ext: str) -> None:
    value = {"a": (1, 2), "s": {3}}
    with pytest.raises(UnsafeOperationError, match="allow_pickle=True"):
        make_encoder(True)({"__key__": "k", ext: value})
    assert _roundtrip(ext, value, allow_pickle=True) == value
    raw = make_encoder(True, allow_pickle=True)({"__key__": "k", ext: value})[ext]
    with pytest.raises(UnsafeOperationError):
        Decoder([])({ext: raw})


@pytest.mark.parametrize("ext", ["png", "ppm", "bmp", "tiff", "tif"])
def test_lossless_image_roundtrip(ext: str) -> None:
    img = _image()
    assert (_roundtrip(ext, img) == img).all()
    assert (_roundtrip(ext, PIL.Image.fromarray(img)) == img).all()


def test_pgm_and_grayscale_roundtrip() -> None:
    gray = _image()[..., 0]
    assert (_roundtrip("pgm", gray, spec="l8") == gray).all()
    assert imageencoder(gray, "pgm").startswith(b"P5")
    assert imageencoder(_image(), "pgm").startswith(b"P5")  # colour converted to grey
    assert imageencoder(_image(), "ppm").startswith(b"P6")
    assert (_roundtrip("png", gray[..., None], spec="l8") == gray).all()


def test_pbm_roundtrip() -> None:
    bits = (_image()[..., 0] > 128).astype(np.uint8) * 255
    out = _roundtrip("pbm", PIL.Image.fromarray(bits).convert("1"), spec="l8")
    assert (out == bits).all()


@pytest.mark.parametrize("ext", ["jpg", "jpeg", "webp"])
def test_lossy_image_roundtrip(ext: str) -> None:
    img = _image()
    out = _roundtrip(ext, img)
    assert out.shape == img.shape and out.dtype == np.uint8
    assert np.abs(out.astype(int) - img.astype(int)).mean() < 3


def test_float_images_and_rgba() -> None:
    img = _image().astype(np.float32) / 255.0
    out = _roundtrip("png", img, spec="rgb")
    assert out.dtype == np.float32 and np.abs(out - img).max() <= 1 / 255 + 1e-6
    rgba = np.dstack([_image(), np.full((24, 40), 90, np.uint8)])
    assert (_roundtrip("png", rgba, spec="rgba8") == rgba).all()


def test_imageencoder_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="outside \\[0, 1\\]"):
        imageencoder(np.full((4, 4), 2.0), "png")
    with pytest.raises(ValueError, match="shape \\(4, 4, 2\\)"):
        imageencoder(np.zeros((4, 4, 2), np.uint8), "png")
    with pytest.raises(ValueError, match="PIL image or an ndarray"):
        imageencoder([[1, 2]], "png")


def test_jpeg_quality_is_100_like_webdataset() -> None:
    img = _image()
    ours = imageencoder(img, "jpg")
    stream = io.BytesIO()
    PIL.Image.fromarray(img).save(stream, format="JPEG", quality=100)
    assert ours == stream.getvalue()


def test_gz_fields_roundtrip() -> None:
    encoded = make_encoder(True)({"__key__": "k", "json.gz": {"a": 1}, "txt.gz": "hi", "bin.gz": b"raw"})
    assert gzip.decompress(encoded["bin.gz"]) == b"raw"
    decoded = Decoder([])(encoded)
    assert decoded["json.gz"] == {"a": 1} and decoded["txt.gz"] == "hi"


def test_bytes_and_str_pass_through() -> None:
    encoded = encode_based_on_extension(
        {"__key__": "k", "jpg": b"\xff\xd8", "json": '{"raw": 1}'}, default_handlers
    )
    assert encoded == {"__key__": "k", "jpg": b"\xff\xd8", "json": b'{"raw": 1}'}


def test_metadata_must_be_str() -> None:
    assert encode_based_on_extension1("x", "__key__", default_handlers) == "x"
    with pytest.raises(ValueError, match="'_meta' must be a str"):
        encode_based_on_extension1(3, "_meta", default_handlers)


def test_unknown_extension_message() -> None:
    with pytest.raises(ValueError, match="no encoder for field 'a.xyz'.*extension 'xyz'"):
        encode_based_on_extension1(object(), "a.xyz", default_handlers)


def test_numpy_dumps_refuses_object_arrays() -> None:
    with pytest.raises(ValueError):
        numpy_dumps(np.array([{"a": 1}], dtype=object))


def test_pth_without_torch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(
        ImportError, match=r"encoding \.pth fields needs the 'torch' package.*pip install torch"
    ):
        torch_dumps({"w": 1})


def test_tenbin_dumps_is_memoryview() -> None:
    assert isinstance(tenbin_dumps(np.zeros(2)), memoryview)


def test_make_encoder_specs() -> None:
    sample = {"__key__": "k", "cls": 3}
    assert make_encoder(False)(sample) is sample
    assert make_encoder(None)(sample) is sample
    assert make_encoder({"cls": lambda x: b"C%d" % x})(sample) == {"__key__": "k", "cls": b"C3"}
    assert make_encoder(lambda s: {"__key__": s["__key__"], "x": b"1"})(sample) == {"__key__": "k", "x": b"1"}
    with pytest.raises(ConfigurationError, match="encoder=3"):
        make_encoder(3)  # type: ignore[arg-type]
    assert "pyd" not in default_handlers and "pyd" in make_handlers(allow_pickle=True)


# webdataset 1.0.2 leaves its shard file for the garbage collector (a ResourceWarning, not ours)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_webdataset_reads_our_shards(tmp_path: Path) -> None:
    wds = require_module("webdataset", "the comparison with WebDataset 1.0.2")
    path = tmp_path / "shard-000000.tar"
    with TarWriter(str(path)) as writer:
        for i in range(3):
            writer.write({"__key__": f"{i:06d}", "png": _image(), "cls": i, "json": {"i": i}})
    with tarfile.open(path) as tar:
        assert len(tar.getnames()) == 9
    samples = list(wds.WebDataset(str(path), shardshuffle=False).decode("rgb8"))
    assert [s["cls"] for s in samples] == [0, 1, 2]
    assert [s["json"] for s in samples] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert (samples[0]["png"] == _image()).all()
