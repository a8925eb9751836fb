"""Audio decoding on PyAV (decoders/audio.py): whole files (torch_audio) and AudioWindows.

Test files are sines of known frequency generated with PyAV, so windows are checked against the
analytic signal at their reported start (sample-exact for lossless formats) and resampling by the
dominant frequency of the result (numpy FFT).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _components import require_module

av = require_module("av", "video and audio decoding with PyAV", package="PyAV")

import shardstream as ss  # noqa: E402
from shardstream.decoders import AudioWindows, Decoder, torch_audio  # noqa: E402
from shardstream.decoders._synthetic import encode_tone, encode_video  # noqa: E402
from shardstream.decoders.audio import decode_audio  # noqa: E402
from shardstream.errors import ConfigurationError, DecodingError  # noqa: E402
from shardstream.tar.sharded_writer import ShardWriter  # noqa: E402

FREQ = 1000.0
SECONDS = 3.0
FORMATS = {"wav": 44100, "flac": 44100, "mp3": 44100, "ogg": 48000, "opus": 48000, "m4a": 44100}
LOSSLESS = {"wav", "flac"}


@pytest.fixture(scope="module")
def tones() -> dict[str, bytes]:
    return {
        ext: encode_tone(SECONDS, sample_rate=rate, container=ext, freq=FREQ, channels=2)
        for ext, rate in FORMATS.items()
    }


def dominant(signal: np.ndarray[Any, Any], rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(signal * np.hanning(len(signal))))
    return float(np.argmax(spectrum) * rate / len(signal))


def best_lag(window: np.ndarray[Any, Any], start: float, rate: int) -> tuple[int, float]:
    """The shift (samples, within a quarter period) that best aligns ``window`` with the tone
    starting at ``start`` seconds, and the largest error at that shift."""
    t = start + np.arange(len(window)) / rate
    errors = {
        lag: float(np.abs(window - 0.5 * np.sin(2 * np.pi * FREQ * (t + lag / rate))).max())
        for lag in range(-int(rate / FREQ / 4), int(rate / FREQ / 4) + 1)
    }
    lag = min(errors, key=lambda k: errors[k])
    return lag, errors[lag]


def windows(seconds: float, **kw: Any) -> AudioWindows:
    return AudioWindows(seconds, output="numpy", **kw)


@pytest.mark.parametrize("ext", list(FORMATS))
def test_whole_file_decoding(tones: dict[str, bytes], ext: str) -> None:
    samples, rate = decode_audio(tones[ext], ext)
    assert rate == FORMATS[ext] and samples.dtype == np.float32 and samples.shape[0] == 2
    assert abs(samples.shape[1] - SECONDS * rate) < 0.05 * rate  # lossy codecs pad a little
    assert dominant(samples[0], rate) == pytest.approx(FREQ, abs=2 * rate / samples.shape[1])
    resampled, new_rate = decode_audio(tones[ext], ext, sample_rate=16000)
    assert new_rate == 16000 and abs(resampled.shape[1] - SECONDS * 16000) < 800


def test_torch_audio_keeps_webdatasets_return_value(tones: dict[str, bytes]) -> None:
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    waveform, rate = torch_audio(".flac", tones["flac"])
    assert isinstance(waveform, torch.Tensor) and waveform.dtype == torch.float32
    assert waveform.shape == (2, SECONDS * 44100) and rate == 44100
    assert torch_audio(".txt", b"x") is None
    sample = Decoder([torch_audio])({"__key__": "k", "wav": tones["wav"]})
    assert sample["wav"][0].shape == (2, SECONDS * 44100)


@pytest.mark.parametrize("ext", list(FORMATS))
@pytest.mark.parametrize("sample_rate", [None, 16000])
def test_windows_hold_the_signal_at_their_starts(
    tones: dict[str, bytes], ext: str, sample_rate: int | None
) -> None:
    result = windows(0.25, sample_rate=sample_rate, windows=4, seed=3)("." + ext, tones[ext])
    assert result is not None
    rate = result["sample_rate"]
    assert rate == (sample_rate or FORMATS[ext])
    samples, starts = result["samples"], result["starts"]
    n = round(0.25 * rate)
    assert samples.shape == (4, 2, n) and samples.dtype == np.float32
    assert starts.dtype == np.float64 and (np.diff(starts) >= 0).all()
    assert (starts >= 0).all() and (starts <= SECONDS - 0.25).all()
    # Sample-exact for lossless formats at their own rate. The resampler's filter shifts by a
    # fraction of a sample; after a seek, FFmpeg's MP3 decoder by 2-3 samples (60 us).
    exact = ext in LOSSLESS and sample_rate is None
    max_lag = 0 if ext in LOSSLESS else 3
    for window, start in zip(samples, starts, strict=True):
        lag, error = best_lag(window[0], start, rate)
        assert abs(lag) <= max_lag and error < (1e-3 if exact else 0.1), (ext, start, lag, error)
        assert dominant(window[0], rate) == pytest.approx(FREQ, abs=rate / n)


def test_resampling_keeps_the_frequency() -> None:
    data = encode_tone(2.0, sample_rate=44100, freq=440.0, container="wav")
    result = windows(1.0, sample_rate=8000, start="center")(".wav", data)
    assert result is not None
    assert result["samples"].shape == (1, 1, 8000)
    assert dominant(result["samples"][0, 0], 8000) == pytest.approx(440.0, abs=1.0)
    assert result["starts"].tolist() == [0.5]


def test_mono_averages_the_channels(tones: dict[str, bytes]) -> None:
    result = windows(0.5, mono=True, start="uniform")(".wav", tones["wav"])
    stereo = windows(0.5, start="uniform")(".wav", tones["wav"])
    assert result is not None and stereo is not None
    assert result["samples"].shape == (1, 1, 22050)
    np.testing.assert_allclose(result["samples"][:, 0], stereo["samples"].mean(axis=1), atol=1e-6)


def test_start_modes(tones: dict[str, bytes]) -> None:
    data = tones["wav"]
    uniform = windows(1.0, windows=3, start="uniform")(".wav", data)
    center = windows(1.0, windows=3, start="center")(".wav", data)
    assert uniform is not None and center is not None
    assert uniform["starts"].tolist() == [0.0, 1.0, 2.0]
    assert center["starts"].tolist() == [0.0, 1.0, 2.0]  # segment centres 0.5/1.5/2.5 minus half a window


def test_a_window_past_the_end_is_zero_padded(tones: dict[str, bytes]) -> None:
    result = windows(5.0)(".wav", tones["wav"])
    assert result is not None
    samples = result["samples"]
    assert samples.shape == (1, 2, 5 * 44100) and result["starts"].tolist() == [0.0]
    assert np.abs(samples[0, :, : 3 * 44100]).max() > 0.4
    assert not samples[0, :, 3 * 44100 :].any()


def _ctx(epoch: int, seed: int | None = None) -> Any:
    return SimpleNamespace(epoch=epoch, seed=seed, world=None)


def test_random_starts_are_a_pure_function_of_seed_epoch_and_key(tones: dict[str, bytes]) -> None:
    decoder = Decoder([windows(0.1, windows=3, seed=11)])

    def starts(d: Decoder, key: str) -> list[float]:
        return list(d({"__key__": key, "wav": tones["wav"]})["wav"]["starts"])

    assert starts(decoder.bind(_ctx(2)), "a") == starts(decoder.bind(_ctx(2)), "a")
    assert starts(decoder, "a") == starts(decoder.bind(_ctx(0)), "a")
    assert starts(decoder.bind(_ctx(2)), "a") != starts(decoder.bind(_ctx(3)), "a")
    assert starts(decoder.bind(_ctx(2)), "a") != starts(decoder.bind(_ctx(2)), "b")
    unseeded = Decoder([windows(0.1, windows=3)])
    assert starts(unseeded.bind(_ctx(2, seed=11)), "a") == starts(decoder.bind(_ctx(2)), "a")


def test_audio_of_a_video() -> None:
    data = encode_video(50, codec="mpeg4", audio_rate=16000, tone_hz=500.0)
    result = windows(0.5, extensions="mp4", start="center")(".mp4", data)
    assert result is not None
    assert result["sample_rate"] == 16000 and result["samples"].shape == (1, 1, 8000)
    assert dominant(result["samples"][0, 0], 16000) == pytest.approx(500.0, abs=2.0)
    assert windows(0.5)(".mp4", data) is None  # not an audio extension by default


def test_torch_output(tones: dict[str, bytes]) -> None:
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    result = AudioWindows(0.1, windows=2, sample_rate=16000)(".wav", tones["wav"])
    assert result is not None
    assert result["samples"].dtype == torch.float32 and result["samples"].shape == (2, 2, 1600)
    assert result["starts"].dtype == torch.float64


def test_corrupt_audio_under_each_handler(tmp_path: Path, tones: dict[str, bytes]) -> None:
    with ShardWriter(str(tmp_path / "a-%02d.tar"), maxcount=100) as sink:
        sink.write({"__key__": "good", "flac": tones["flac"]})
        sink.write({"__key__": "bad", "flac": b"fLaC" + bytes(500)})
        sink.write({"__key__": "cut", "flac": tones["flac"][:40]})
    url = str(tmp_path / "a-00.tar")
    decoder = windows(0.5)
    with pytest.raises(DecodingError) as info:
        list(ss.WebDataset(url, shardshuffle=False).decode(decoder))
    assert info.value.key == "bad" and "'bad'" in str(info.value) and url in str(info.value)
    with pytest.warns(UserWarning):
        kept = list(ss.WebDataset(url, shardshuffle=False).decode(decoder, handler=ss.warn_and_continue))
    assert [s["__key__"] for s in kept] == ["good"]
    with pytest.raises(DecodingError, match="no audio stream"):
        windows(0.5, extensions="mp4")(".mp4", encode_video(5, codec="mpeg4"))


def test_arguments_are_checked() -> None:
    for args, kw in (
        ((0,), {}),
        ((1.0,), {"sample_rate": 0}),
        ((1.0,), {"windows": 0}),
        ((1.0,), {"start": "end"}),
        ((1.0,), {"output": "list"}),
    ):
        with pytest.raises(ConfigurationError):
            AudioWindows(*args, **kw)
    assert "AudioWindows(2.0, sample_rate=16000" in repr(windows(2, sample_rate=16000))
