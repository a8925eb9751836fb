"""Tests for shardstream.decoders: dispatch, image specs, fast JPEG, safety, errors."""

from __future__ import annotations

import gzip
import io
import pickle
import sys
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch
from _components import require_component, require_module

from shardstream.decoders import (
    Continue,
    Decoder,
    DecodingError,
    basichandlers,
    get_decoder,
    gzfilter,
    handle_extension,
    imagehandler,
    imagespecs,
    make_decoder,
    register_decoder,
    torch_audio,
    torch_loads,
    torch_video,
    unregister_decoder,
)
from shardstream.decoders._jpeg import get_backend
from shardstream.errors import ConfigurationError, UnsafeOperationError
from shardstream.optional import require
from shardstream.tar.encoders import torch_dumps

# ------------------------------------------------------------------ helpers

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)


def _quadrants(h: int = 32, w: int = 48) -> np.ndarray[Any, Any]:
    """Red top-left, green top-right, blue bottom-left, white bottom-right."""
    img = np.zeros((h, w, 3), np.uint8)
    img[: h // 2, : w // 2] = RED
    img[: h // 2, w // 2 :] = GREEN
    img[h // 2 :, : w // 2] = BLUE
    img[h // 2 :, w // 2 :] = 255
    return img


def _encode(array: np.ndarray[Any, Any], fmt: str, **options: Any) -> bytes:
    stream = io.BytesIO()
    PIL.Image.fromarray(array).save(stream, format=fmt, **options)
    return stream.getvalue()


def _smooth(h: int = 64, w: int = 80) -> np.ndarray[Any, Any]:
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (h + w)], axis=2).astype(np.uint8)


class Opaque:
    """A class that a weights-only torch.load must refuse."""

    def __init__(self) -> None:
        self.value = 42


# ------------------------------------------------------------------ image specs

SPECS = {
    # spec: (kind, dtype, channels (0 = 2-D), channels-first)
    "l8": ("numpy", np.uint8, 0, False),
    "rgb8": ("numpy", np.uint8, 3, False),
    "rgba8": ("numpy", np.uint8, 4, False),
    "l": ("numpy", np.float32, 0, False),
    "rgb": ("numpy", np.float32, 3, False),
    "rgba": ("numpy", np.float32, 4, False),
    "torchl8": ("torch", torch.uint8, 0, True),
    "torchrgb8": ("torch", torch.uint8, 3, True),
    "torchrgba8": ("torch", torch.uint8, 4, True),
    "torchl": ("torch", torch.float32, 0, True),
    "torchrgb": ("torch", torch.float32, 3, True),
    "torch": ("torch", torch.float32, 3, True),
    "torchrgba": ("torch", torch.float32, 4, True),
}


def test_spec_table_is_complete() -> None:
    assert set(SPECS) | {"pil", "pill", "pilrgb", "pilrgba"} == set(imagespecs)


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_image_spec_shape_dtype_order_range(spec: str) -> None:
    kind, dtype, channels, chw = SPECS[spec]
    img = _quadrants()
    decoded = Decoder([spec])({"__key__": "k", "png": _encode(img, "PNG")})["png"]
    assert isinstance(decoded, np.ndarray if kind == "numpy" else torch.Tensor)
    out: Any = decoded  # an array or a tensor, per kind
    assert out.dtype == dtype
    arr = out.numpy() if kind == "torch" else out
    if channels == 0:
        assert arr.shape == (32, 48)
    elif chw:
        assert arr.shape == (channels, 32, 48)
        arr = arr.transpose(1, 2, 0)
    else:
        assert arr.shape == (32, 48, channels)
    scale = 255.0 if dtype in (np.float32, torch.float32) else 1.0
    if dtype in (np.float32, torch.float32):
        assert 0.0 <= arr.min() and arr.max() <= 1.0
    pixels = arr * scale
    if channels == 0:
        # ITU-R 601 luma of red, green, blue
        assert np.allclose(
            [pixels[0, 0], pixels[0, -1], pixels[-1, 0], pixels[-1, -1]], [76, 150, 29, 255], atol=1
        )
    else:
        assert np.allclose(pixels[0, 0, :3], RED) and np.allclose(pixels[0, -1, :3], GREEN)
        assert np.allclose(pixels[-1, 0, :3], BLUE) and np.allclose(pixels[-1, -1, :3], 255)
        if channels == 4:
            assert np.allclose(pixels[..., 3], 255)
    if kind == "numpy":
        assert out.flags.writeable and out.flags.c_contiguous
    else:
        assert out.is_contiguous()


@pytest.mark.parametrize("spec,mode", [("pil", "RGB"), ("pilrgb", "RGB"), ("pill", "L"), ("pilrgba", "RGBA")])
def test_pil_specs(spec: str, mode: str) -> None:
    out = Decoder(spec)({"png": _encode(_quadrants(), "PNG")})["png"]
    assert isinstance(out, PIL.Image.Image)
    assert out.mode == mode and out.size == (48, 32)
    assert np.asarray(out.convert("RGB"))[0, 0].tolist() == ([255, 0, 0] if mode != "L" else [76, 76, 76])


def test_rgba_alpha_is_kept() -> None:
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = 77
    out = Decoder("rgba8")({"png": _encode(rgba, "PNG")})["png"]
    assert out[0, 0].tolist() == [200, 0, 0, 77]
    out = Decoder("rgb8")({"png": _encode(rgba, "PNG")})["png"]
    assert out.shape == (4, 4, 3)


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_specs_match_webdataset_on_png(spec: str) -> None:
    wds_autodecode = require_module(
        "webdataset.autodecode", "the comparison with WebDataset 1.0.2's decoders", package="webdataset"
    )
    data = _encode(_smooth(), "PNG")
    ours = imagehandler(spec)(".png", data)
    theirs = wds_autodecode.imagehandler(spec)(".png", data)
    assert type(ours) is type(theirs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert (np.asarray(ours) == np.asarray(theirs)).all()


def test_image_extensions_case_insensitive_and_non_images_pass() -> None:
    sample = {"__key__": "k", "seg.PNG": _encode(_quadrants(), "PNG"), "bin": b"\x00\x01"}
    out = Decoder("rgb8")(sample)
    assert out["seg.PNG"].shape == (32, 48, 3)
    assert out["bin"] == b"\x00\x01"


def test_unknown_spec_is_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="'rgb16'.*rgb8"):
        Decoder("rgb16")


# ------------------------------------------------------------------ fast JPEG


@pytest.fixture
def needs_fast() -> None:
    present = get_backend("auto") is not None
    require_component("simplejpeg or PyTurboJPEG", "the fast JPEG decoders against Pillow", present=present)


@pytest.mark.usefixtures("needs_fast")
@pytest.mark.parametrize(
    "spec", ["rgb8", "l8", "rgba8", "rgb", "l", "torchrgb8", "torchl8", "torchrgb", "torchrgba"]
)
@pytest.mark.parametrize("variant", ["baseline", "progressive", "gray", "444"])
def test_fast_jpeg_matches_pillow(spec: str, variant: str) -> None:
    img = _smooth()
    if variant == "gray":
        data = _encode(img[..., 0], "JPEG", quality=90)
    elif variant == "progressive":
        data = _encode(img, "JPEG", quality=90, progressive=True)
    elif variant == "444":
        data = _encode(img, "JPEG", quality=90, subsampling=0)
    else:
        data = _encode(img, "JPEG", quality=90)
    fast = imagehandler(spec)
    assert fast._fast is not None
    slow = imagehandler(spec, jpeg_backend="pillow")
    assert slow._fast is None
    a, b = fast(".jpg", data), slow(".jpg", data)
    assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype
    a_np = a.numpy() if isinstance(a, torch.Tensor) else a
    b_np = b.numpy() if isinstance(b, torch.Tensor) else b
    scale = 255.0 if a_np.dtype == np.float32 else 1.0
    diff = np.abs(a_np.astype(np.float64) - b_np.astype(np.float64)) * scale
    assert diff.mean() < 0.5 and diff.max() <= 2


@pytest.mark.usefixtures("needs_fast")
def test_fast_jpeg_channel_order() -> None:
    data = _encode(_quadrants(64, 64), "JPEG", quality=95)
    out = imagehandler("rgb8")(".jpg", data)
    assert np.allclose(out[8, 8], RED, atol=6) and np.allclose(out[8, 56], GREEN, atol=6)
    assert np.allclose(out[56, 8], BLUE, atol=6)


def test_jpeg_fallbacks_to_pillow() -> None:
    # CMYK JPEG: the fast path declines, Pillow converts.
    cmyk = PIL.Image.new("CMYK", (16, 8), (10, 20, 30, 40))
    stream = io.BytesIO()
    cmyk.save(stream, "JPEG")
    data = stream.getvalue()
    expected = np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))
    assert (imagehandler("rgb8")(".jpg", data) == expected).all()
    # PNG bytes under a .jpg name still decode.
    png = _encode(_quadrants(), "PNG")
    assert (imagehandler("rgb8")(".jpg", png) == _quadrants()).all()


def test_jpeg_backend_validation() -> None:
    with pytest.raises(ConfigurationError, match="jpeg_backend='nope'"):
        imagehandler("rgb8", jpeg_backend="nope")
    try:
        backend = get_backend("turbojpeg")
    except ImportError as exc:
        assert "pip install" in str(exc)
    else:
        assert backend is not None


def test_corrupt_jpeg_raises_decoding_error() -> None:
    data = _encode(_smooth(), "JPEG")[:100]
    with pytest.raises(DecodingError) as info:
        Decoder("rgb8")({"__key__": "k1", "__url__": "/d/a.tar", "jpg": data})
    assert info.value.extension == "jpg"


# ------------------------------------------------------------------ basic types and dispatch


def test_basic_types_match_webdataset_default_decoder() -> None:
    wds_autodecode = require_module(
        "webdataset.autodecode", "the comparison with WebDataset 1.0.2's decoders", package="webdataset"
    )
    sample = {
        "__key__": b"k",
        "txt": "héllo".encode(),
        "cls": b"7",
        "index": b" 12\n",
        "json": b'{"a": [1, 2]}',
        "npy": _npy(np.arange(6).reshape(2, 3)),
        "unknown": b"\x00raw",
        "json.gz": gzip.compress(b"[1, 2]"),
    }
    ours = Decoder([])(sample)
    theirs = wds_autodecode.Decoder([])(dict(sample))
    assert ours.keys() == theirs.keys()
    for key in ours:
        if isinstance(ours[key], np.ndarray):
            assert (ours[key] == theirs[key]).all()
        else:
            assert ours[key] == theirs[key], key
    assert ours["__key__"] == "k" and ours["cls"] == 7 and ours["json.gz"] == [1, 2]


def _npy(a: np.ndarray[Any, Any]) -> bytes:
    stream = io.BytesIO()
    np.save(stream, a)
    return stream.getvalue()


def test_only_and_partial() -> None:
    sample = {"cls": b"1", "txt": b"x"}
    assert Decoder([], only="cls")(sample) == {"cls": 1, "txt": b"x"}
    assert Decoder([], only=["txt"])(sample) == {"cls": b"1", "txt": "x"}
    with pytest.raises(DecodingError, match="partial=True"):
        Decoder([])({"cls": 3})
    assert Decoder([], partial=True)({"cls": 3, "txt": b"y"}) == {"cls": 3, "txt": "y"}


def test_memoryview_and_bytearray_values_decode() -> None:
    assert Decoder([])({"cls": memoryview(b"5"), "txt": bytearray(b"t")}) == {"cls": 5, "txt": "t"}


def test_handle_extension_multi_component_and_order() -> None:
    seg = handle_extension("seg.png", lambda data: "seg")
    custom_cls = handle_extension("CLS", lambda data: "mine")
    out = Decoder([seg, custom_cls, "rgb8"])(
        {"seg.png": _encode(_quadrants(), "PNG"), "png": _encode(_quadrants(), "PNG"), "cls": b"1"}
    )
    assert out["seg.png"] == "seg"
    assert out["png"].shape == (32, 48, 3)
    assert out["cls"] == "mine"  # main handlers run before the default post-handlers


def test_dispatch_calls_only_matching_declared_handlers() -> None:
    calls: list[str] = []

    def generic(key: str, data: bytes) -> None:
        calls.append(key)
        return None

    decoder = Decoder([generic, handle_extension("foo", lambda d: "foo!")])
    out = decoder({"a.foo": b"x", "cls": b"2", "txt": b"t"})
    assert out == {"a.foo": "foo!", "cls": 2, "txt": "t"}
    assert sorted(calls) == [".a.foo", ".cls", ".txt"]  # undeclared handler sees every field
    assert decoder._plan("cls") == decoder._plan("cls")  # cached
    assert [type(decoder.handlers[i]).__name__ for i, _, _ in decoder._plan("a.foo")] == [
        "function",
        "ExtensionHandler",
    ]  # basichandlers is not consulted for .foo


def test_continue_and_gzfilter() -> None:
    def rot(key: str, data: bytes) -> Continue | None:
        if key.endswith(".rot"):
            return Continue(key[:-4], bytes(b ^ 1 for b in data))
        return None

    out = Decoder([rot])({"cls.rot": bytes(b ^ 1 for b in b"9"), "txt.gz": gzip.compress(b"zz")})
    assert out == {"cls.rot": 9, "txt.gz": "zz"}
    assert gzfilter(".txt", b"x") is None
    result = gzfilter(".json.gz", gzip.compress(b"[]"))
    assert isinstance(result, Continue) and result.key == ".json" and result.data == b"[]"


def test_register_decoder() -> None:
    register_decoder("upper", lambda d: d.decode().upper())
    try:
        assert Decoder([])({"upper": b"abc"}) == {"upper": "ABC"}
        assert basichandlers(".x.upper", b"q") == "Q"
    finally:
        unregister_decoder("upper")
    assert get_decoder("upper") is None
    register_decoder("halfmoon", "json:loads")
    try:
        assert Decoder([])({"halfmoon": b"[3]"}) == {"halfmoon": [3]}
    finally:
        unregister_decoder("halfmoon")
    with pytest.raises(ConfigurationError):
        register_decoder("x", 3)  # type: ignore[arg-type]


def test_bad_handlers_and_samples() -> None:
    with pytest.raises(ConfigurationError, match="neither a handler"):
        Decoder([3])
    with pytest.raises(ConfigurationError, match="before"):
        Decoder([])(("a", "b"))  # type: ignore[arg-type]


def test_make_decoder_takes_webdataset_decode_arguments() -> None:
    decoder = make_decoder(
        "rgb8", handle_extension("foo", lambda d: 1), pre=[], post=None, only=None, partial=False
    )
    assert isinstance(decoder, Decoder)
    out = decoder({"png": _encode(_quadrants(), "PNG"), "foo": b"", "json.gz": gzip.compress(b"1")})
    assert out["png"].shape == (32, 48, 3) and out["foo"] == 1
    assert out["json.gz"] == gzip.compress(b"1")  # pre=[] removed gzfilter
    assert make_decoder(handler=lambda exn: True)({"cls": b"3"}) == {"cls": 3}
    assert (
        make_decoder("pil", jpeg_backend="pillow")({"png": _encode(_quadrants(), "PNG")})["png"].mode == "RGB"
    )


def test_metadata_fields_are_only_utf8_decoded() -> None:
    out = Decoder([])({"__key__": b"k", "__url__": "u", "__local_path__": b"\xff"})
    assert out == {"__key__": "k", "__url__": "u", "__local_path__": b"\xff"}


# ------------------------------------------------------------------ errors


def test_decoding_error_names_url_key_and_extension() -> None:
    sample = {"__key__": "sample-7", "__url__": "https://user:secret@host/shard-3.tar", "cls": b"not-an-int"}
    with pytest.raises(DecodingError) as info:
        Decoder([])(sample)
    message = str(info.value)
    assert "sample-7" in message and "host/shard-3.tar" in message and "'cls'" in message
    assert "secret" not in message
    assert info.value.key == "sample-7" and info.value.extension == "cls"
    assert info.value.url is not None and "shard-3.tar" in info.value.url
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, ValueError)


# ------------------------------------------------------------------ pickle and .pth safety


@pytest.mark.parametrize("ext", ["pyd", "pickle", "pkl"])
def test_pickle_refused_by_default(ext: str) -> None:
    sample = {"__key__": "k", "__url__": "a.tar", ext: pickle.dumps({"a": 1})}
    with pytest.raises(UnsafeOperationError) as info:
        Decoder([])(sample)
    assert "allow_pickle=True" in str(info.value) and "'k'" in str(info.value)
    assert isinstance(info.value, PermissionError)
    assert Decoder([], allow_pickle=True)(sample)[ext] == {"a": 1}
    assert make_decoder(allow_pickle=True)(sample)[ext] == {"a": 1}
    # opting in on one decoder does not change the default one
    with pytest.raises(UnsafeOperationError):
        make_decoder()(sample)


def test_pth_loads_tensors_with_weights_only() -> None:
    value: dict[str, Any] = {"w": torch.arange(4.0), "n": 3, "names": ["a"]}
    out = Decoder([])({"pth": torch_dumps(value)})["pth"]
    assert torch.equal(out["w"], value["w"]) and out["n"] == 3 and out["names"] == ["a"]
    assert torch.equal(torch_loads(torch_dumps(torch.ones(2))), torch.ones(2))


def test_pth_with_arbitrary_object_refused() -> None:
    data = torch_dumps(Opaque())
    with pytest.raises(UnsafeOperationError, match="allow_pickle=True"):
        Decoder([])({"__key__": "k", "pth": data})
    with pytest.raises(UnsafeOperationError):
        torch_loads(data)
    assert Decoder([], allow_pickle=True)({"pth": data})["pth"].value == 42


# ------------------------------------------------------------------ optional backends


def test_require_gives_install_hint() -> None:
    with pytest.raises(ImportError, match="pip install nothing-here"):
        require("shardstream_no_such_module", purpose="testing", install="pip install nothing-here")


_NO_TORCH_HINT = r"pip install torch \(shardstream deliberately does not depend on torch"


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import torch`` fails from here on, as when torch is not installed."""
    monkeypatch.setitem(sys.modules, "torch", None)


@pytest.mark.usefixtures("no_torch")
def test_without_torch_pth_fields_say_what_to_install() -> None:
    with pytest.raises(ImportError, match=_NO_TORCH_HINT) as info:
        torch_loads(b"not read")
    assert info.value.name == "torch"
    with pytest.raises(ImportError, match=_NO_TORCH_HINT):
        Decoder([])({"__key__": "k", "pth": b"not read"})


@pytest.mark.usefixtures("no_torch")
def test_without_torch_tensor_image_specs_fail_when_built() -> None:
    with pytest.raises(ImportError, match="image spec 'torchrgb8' needs the 'torch' package"):
        Decoder("torchrgb8")
    rgb = Decoder("rgb8")({"png": _encode(_quadrants(), "PNG")})["png"]  # numpy specs need no torch
    assert rgb.shape == (32, 48, 3)


@pytest.mark.parametrize("spec", ["rgb8", "torchrgb", "pil"])
def test_image_handler_pickles_after_use(spec: str) -> None:
    # DataLoader workers started with spawn receive the decoder pickled, possibly after it decoded
    # in the main process: the JPEG backend (a closure) and the torch module must not travel.
    handler = imagehandler(spec)
    data = _encode(_smooth(), "JPEG", quality=95)
    before = handler(".jpg", data)
    copy = pickle.loads(pickle.dumps(handler))
    after = copy(".jpg", data)
    assert type(after) is type(before)
    assert np.array_equal(np.asarray(after), np.asarray(before))
    assert pickle.loads(pickle.dumps(Decoder(spec)))({"jpg": data})["jpg"] is not None


def test_field_decoder_is_the_decoder_alias() -> None:
    import shardstream.decoders as decoders

    assert "FieldDecoder" in decoders.__all__
    # "Handler" is shardstream.handlers.Handler (an error policy); the decoders no longer reuse it.
    assert not hasattr(decoders, "Handler")


def test_video_and_audio_handlers() -> None:
    """torch_video / torch_audio decode with PyAV (no torchvision/torchaudio); bad bytes are a
    DecodingError naming the field, which the pipeline's handler applies."""
    assert torch_video(".txt", b"x") is None
    assert torch_audio(".txt", b"x") is None
    require_module("av", "video and audio decoding with PyAV", package="PyAV")
    with pytest.raises(DecodingError, match="mp4"):
        torch_video(".mp4", b"not a video")
    with pytest.raises(DecodingError, match="wav"):
        torch_audio(".wav", b"not audio")


def test_image_and_basic_handlers_declare_dispatch_extensions() -> None:
    decoder = Decoder("rgb8")

    def names(field: str) -> list[str]:
        return [type(decoder.handlers[i]).__name__ for i, _, _ in decoder._plan(field)]

    assert names("jpg") == ["ImageHandler"]
    assert names("seg.JPG") == ["ImageHandler"]
    assert names("cls") == ["BasicHandlers"]
    assert names("x.gz") == ["_GzFilter"]
    assert names("weird") == []
    # resolved to direct loaders: no per-field extension parsing at decode time
    assert all(direct for _, _, direct in decoder._plan("cls") + decoder._plan("jpg"))
    assert not any(direct for _, _, direct in decoder._plan("x.gz"))


def test_dotted_extension_handler_sees_whole_key() -> None:
    seg = handle_extension("seg.cls", lambda data: "segment")
    decoder = Decoder([seg])
    assert decoder({"seg.cls": b"1", "cls": b"2", "other.cls": b"3"}) == {
        "seg.cls": "segment",
        "cls": 2,
        "other.cls": 3,
    }
