"""JPEG decompression bombs on every decoding path (issue 9, item 4).

The fast JPEG backends allocate whatever the header declares, so the header's dimensions must pass
Pillow's own check (same limit, rule and types) first. Bombs are tiny real JPEGs whose SOF marker
is patched to claim a huge size; they are decoded in a child process whose address space is
limited (RLIMIT_AS), so a regression fails with an error instead of taking the machine down.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from _components import require_module

from shardstream.decoders import Decoder, ImageHandler, _jpeg, imagespecs
from shardstream.errors import DecodingError

Image = require_module("PIL.Image", "image encoding and decoding with Pillow", package="Pillow")
require_module("simplejpeg", "JPEG decoding with simplejpeg")

pytestmark = pytest.mark.timeout(120)

# A small real JPEG (64x48 = 3072 pixels) in several flavours, and a patcher for its SOF marker.
CRAFT = textwrap.dedent(
    """
    import io, struct
    import numpy as np
    from PIL import Image

    def jpeg(flavour):
        rgb = np.random.default_rng(0).integers(0, 255, (48, 64, 3)).astype(np.uint8)
        image = Image.fromarray(rgb)
        out = io.BytesIO()
        if flavour == "gray":
            image = image.convert("L")
        elif flavour == "cmyk":
            image = image.convert("CMYK")
        image.save(out, "JPEG", progressive=flavour == "progressive")
        return out.getvalue()

    def claim(data, width, height):
        data = bytearray(data)
        for marker in (b"\\xff\\xc0", b"\\xff\\xc1", b"\\xff\\xc2"):  # baseline, extended, progressive
            at = data.find(marker)
            if at >= 0:
                struct.pack_into(">HH", data, at + 5, height, width)
                return bytes(data)
        raise ValueError("no SOF marker")
    """
)
_helpers: dict[str, Any] = {}
exec(CRAFT, _helpers)  # the same helpers run in the child process
jpeg, claim = _helpers["jpeg"], _helpers["claim"]

FLAVOURS = ["baseline", "progressive", "gray", "cmyk"]
SPECS = sorted(imagespecs)
BACKENDS = ["auto", "pillow"]


def test_crafted_bombs_are_tiny_and_claim_their_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # only to read the claimed size back
    for flavour in FLAVOURS:
        data = claim(jpeg(flavour), 65500, 14000)
        assert len(data) < 8000 and Image.open(io.BytesIO(data)).size == (65500, 14000)


# -- the rule mirrors Pillow's, in process, with a small limit on a small image ----------------


def _needs_torch(spec: str) -> None:
    if imagespecs[spec].atype == "torch":
        require_module("torch", "the PyTorch DataLoader and tensor paths")


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_between_one_and_two_limits_warns_and_decodes_like_pillow(
    spec: str, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_torch(spec)
    data = jpeg(flavour)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2000)  # 3072 pixels: above 1x, below 2x
    results = []
    for backend in BACKENDS:
        with pytest.warns(Image.DecompressionBombWarning, match="3072 pixels"):
            results.append(ImageHandler(spec, jpeg_backend=backend).decode(data, "jpg"))
    fast, pillow = results
    if imagespecs[spec].atype == "pil":
        assert fast.size == pillow.size == (64, 48)
    else:
        # (Values may differ where the backends' grey conversion does; see decoders/_jpeg.py.)
        assert tuple(fast.shape) == tuple(pillow.shape) and fast.dtype == pillow.dtype


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_above_two_limits_is_pillows_error_on_every_path(
    spec: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_torch(spec)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    for flavour in FLAVOURS:
        data = jpeg(flavour)
        with pytest.raises(Image.DecompressionBombError, match="3072 pixels"):
            ImageHandler(spec, jpeg_backend=backend).decode(data, "jpg")
        with pytest.raises(DecodingError, match="MAX_IMAGE_PIXELS") as info:
            Decoder([spec], jpeg_backend=backend)({"__key__": "k", "jpg": data})
        assert isinstance(info.value.__cause__, Image.DecompressionBombError)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # Pillow's switch turns the check off
    ImageHandler(spec, jpeg_backend=backend).decode(jpeg("baseline"), "jpg")


def test_without_pillow_the_default_limit_still_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jpeg, "_pillow_image", lambda: None)
    with pytest.raises(DecodingError, match="exceeds limit of 178956970 pixels"):
        _jpeg.check_pixels(14000, 14000)
    with pytest.warns(RuntimeWarning, match="exceeds limit of 89478485 pixels"):
        _jpeg.check_pixels(10000, 10000)
    _jpeg.check_pixels(9000, 9000)


# -- real bombs, in a child process with a limited address space -------------------------------

CHILD = CRAFT + textwrap.dedent(
    """
    import json, resource, sys, warnings
    import shardstream.decoders._jpeg as fast
    from shardstream.decoders import Decoder, imagespecs
    from shardstream.errors import DecodingError
    try:
        import torch  # noqa: F401 - loaded before the limit: the torch specs need it
    except ImportError:
        pass

    def vm_bytes():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))

    specs = [s for s in sorted(imagespecs) if imagespecs[s].atype != "torch" or "torch" in sys.modules]
    decoders = {(s, b): Decoder([s], jpeg_backend=b) for s in specs for b in ("auto", "pillow")}
    assert fast.get_backend("auto") is not None  # the fast path is what is under test
    for flavour in ("baseline", "progressive", "gray", "cmyk"):  # warm up every path on a real image
        for decoder in decoders.values():
            decoder({"__key__": "k", "jpg": jpeg(flavour)})
    headroom = 768 << 20
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + headroom, resource.getrlimit(resource.RLIMIT_AS)[1]))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # Between 1x and 2x Pillow warns and decodes; as an error here, the warning stops the decode
    # (10000x10000 RGB float would need 1.2 GB, past the headroom).
    warnings.simplefilter("error", fast._pillow_image().DecompressionBombWarning)
    results = []
    for width, height in ((14000, 14000), (65500, 65500), (65500, 3000), (10000, 10000)):
        for flavour in ("baseline", "progressive", "gray", "cmyk"):
            data = claim(jpeg(flavour), width, height)
            for (spec, backend), decoder in decoders.items():
                for field in ("jpg", "jpeg", "png"):  # png: JPEG bytes under another extension
                    try:
                        decoder({"__key__": "k", field: data})
                        outcome = "decoded"
                    except DecodingError as exc:
                        outcome = type(exc.__cause__).__name__
                    except BaseException as exc:
                        outcome = "raw " + type(exc).__name__
                    results.append([width, height, flavour, spec, backend, field, outcome])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"results": results, "grew": after - before, "headroom": headroom}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux-specific")
def test_bombs_under_every_spec_in_a_memory_limited_process() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSTREAM_", "WDS_"))}
    env["OMP_NUM_THREADS"] = "1"  # no thread pools to reserve address space after the limit
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=100, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    results = report["results"]
    specs = {r[3] for r in results}
    assert specs >= {s for s in SPECS if imagespecs[s].atype != "torch"}
    wrong = [
        r
        for r in results
        if r[-1] != ("DecompressionBombWarning" if r[0] == 10000 else "DecompressionBombError")
    ]
    assert not wrong, wrong[:10]
    assert len(results) == 4 * 4 * len(specs) * 2 * 3
    assert report["grew"] < 64 << 20, report["grew"]  # peak RSS: no image buffer was ever allocated
