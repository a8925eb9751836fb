"""Tests for shardstream.malloc.tune_allocator, measured in fresh subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from shardstream import malloc as _malloc

needs_glibc = pytest.mark.skipif(not _malloc.is_glibc(), reason="allocator tuning only applies to glibc")

# Decode PNGs with Pillow in a fresh process and report minor page faults per image.
_PROBE = textwrap.dedent(
    """
    import io, resource, sys
    import numpy as np
    import PIL.Image
    tune = sys.argv[1] == "1"
    rng = np.random.default_rng(0)
    img = PIL.Image.fromarray(rng.integers(0, 255, (256, 256, 3), dtype=np.uint8))
    stream = io.BytesIO(); img.save(stream, format="PNG"); data = stream.getvalue()
    if tune:
        from shardstream.malloc import tune_allocator
        assert tune_allocator()
    def decode():
        return np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))
    for _ in range(20):
        decode()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        decode()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200)
    """
)


def _faults_per_image(tune: bool) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, "1" if tune else "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip())


@needs_glibc
def test_tune_allocator_is_idempotent() -> None:
    assert _malloc.tune_allocator() is True
    assert _malloc.tune_allocator() is True
    assert _malloc._applied == (_malloc.DEFAULT_MMAP_THRESHOLD, _malloc.DEFAULT_TRIM_THRESHOLD)


def test_out_of_range_values_rejected() -> None:
    # mallopt takes a C int: larger values would silently wrap (1 << 40 becomes 0: mmap everything)
    with pytest.raises(ValueError, match="mmap_threshold=1099511627776 is out of range"):
        _malloc.tune_allocator(mmap_threshold=1 << 40)
    with pytest.raises(ValueError, match="trim_threshold=-1"):
        _malloc.tune_allocator(trim_threshold=-1)


@needs_glibc
def test_tuning_removes_page_faults_per_image() -> None:
    default = _faults_per_image(tune=False)
    tuned = _faults_per_image(tune=True)
    assert tuned < 5, (default, tuned)
    assert tuned <= default, (default, tuned)


def test_no_op_off_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_malloc, "_glibc", lambda: None)
    monkeypatch.setattr(_malloc, "_applied", None)
    assert _malloc.tune_allocator() is False


def _tuned_in_worker(spec: str) -> object:
    """What a WebLoader worker running a decode stage reports as its allocator tuning."""
    import shardstream as ss

    ds = ss.ShardStream(spec).decode().map(lambda sample: {"tuned": _malloc._applied})
    with ss.WebLoader(ds, num_workers=1, batch_size=None) as loader:
        return next(iter(loader))["tuned"]


@needs_glibc
@pytest.mark.parametrize(("setting", "tuned"), [(None, True), ("1", True), ("0", False)])
def test_workers_tune_the_allocator_unless_opted_out(
    make_shards: object, monkeypatch: pytest.MonkeyPatch, setting: str | None, tuned: bool
) -> None:
    spec, _ = make_shards(counts=[4])  # type: ignore[operator]
    monkeypatch.setattr(_malloc, "_applied", None)  # what a forked worker inherits from this process
    if setting is None:
        monkeypatch.delenv("SHARDSTREAM_TUNE_MALLOC", raising=False)
    else:
        monkeypatch.setenv("SHARDSTREAM_TUNE_MALLOC", setting)
    got = _tuned_in_worker(spec)
    assert (got is not None) == tuned, got
