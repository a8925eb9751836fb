"""Video decoding on PyAV (decoders/clips.py, video.py, _av.py): clips, whole files, metadata, errors.

Test videos are generated here with PyAV; each frame draws its own index (``read_pattern``), so a
decoded frame proves which frame it is, and clip sampling is checked frame-exactly after seeking.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _components import require_module

av = require_module("av", "video and audio decoding with PyAV", package="PyAV")

import shardstream as ss  # noqa: E402
from shardstream.decoders import Decoder, VideoClips, torch_video, video_info  # noqa: E402
from shardstream.decoders._av import thread_count  # noqa: E402
from shardstream.decoders._synthetic import encode_video, h264_encoder, read_pattern  # noqa: E402
from shardstream.decoders.video import VideoSummary, decode_video, probe_video  # noqa: E402
from shardstream.errors import ConfigurationError, DecodingError  # noqa: E402
from shardstream.tar.sharded_writer import ShardWriter  # noqa: E402

FRAMES = 100  # 4 s at 25 fps

#: name -> (extension, encode_video arguments)
VIDEOS: dict[str, tuple[str, dict[str, Any]]] = {
    "h264": ("mp4", {"codec": "h264", "gop": 20}),  # x264 with B-frames, a keyframe every 20
    "h264_default_gop": ("mp4", {"codec": "h264"}),  # x264's own keyframe placement
    "mpeg4_audio": ("mp4", {"codec": "mpeg4", "audio_rate": 16000}),
    "mkv": ("mkv", {"codec": "h264", "gop": 25}),  # no frame count in the headers
    "webm": ("webm", {"codec": "libvpx-vp9", "audio_rate": 48000}),
    "avi": ("avi", {"codec": "mpeg4"}),
    "mov": ("mov", {"codec": "h264", "audio_rate": 44100, "gop": 30}),
}


@pytest.fixture(scope="module")
def videos() -> dict[str, tuple[str, bytes]]:
    return {name: (ext, encode_video(FRAMES, container=ext, **kw)) for name, (ext, kw) in VIDEOS.items()}


def patterns(frames: Any) -> np.ndarray[Any, Any]:
    array = np.asarray(frames)
    flat = array.reshape(-1, *array.shape[-3:])
    return np.array([read_pattern(f) for f in flat]).reshape(array.shape[:-3])


def numpy_clips(num_frames: int, **kw: Any) -> VideoClips:
    return VideoClips(num_frames, output="numpy", **kw)


@pytest.mark.parametrize("name", list(VIDEOS))
def test_clip_frames_are_the_frames_named_by_indices(videos: dict[str, tuple[str, bytes]], name: str) -> None:
    ext, data = videos[name]
    for seed in range(3):
        result = numpy_clips(8, clips=3, step=2, seed=seed)("." + ext, data)
        assert result is not None
        frames, indices = result["frames"], result["indices"]
        assert frames.shape == (3, 8, 64, 64, 3) and frames.dtype == np.uint8
        assert indices.shape == (3, 8) and indices.dtype == np.int64
        assert (np.diff(indices, axis=1) == 2).all()
        assert (np.diff(indices[:, 0]) >= 0).all(), "clips are ordered by start"
        np.testing.assert_array_equal(patterns(frames), indices)
        assert result["total_frames"] == FRAMES
        assert result["fps"] == 25.0
        assert result["duration"] == pytest.approx(4.0, abs=0.05)


def test_start_modes(videos: dict[str, tuple[str, bytes]]) -> None:
    _, data = videos["h264"]
    uniform = numpy_clips(8, clips=3, start="uniform")(".mp4", data)
    center = numpy_clips(8, clips=3, start="center")(".mp4", data)
    one = numpy_clips(8, start="uniform")(".mp4", data)
    assert uniform is not None and center is not None and one is not None
    assert uniform["indices"][:, 0].tolist() == [0, 46, 92]  # first to last possible start
    assert center["indices"][:, 0].tolist() == [13, 46, 79]  # centred in thirds of the video
    assert one["indices"][0, 0] == 46
    for result in (uniform, center):
        np.testing.assert_array_equal(patterns(result["frames"]), result["indices"])
    with pytest.raises(ConfigurationError, match="start='middle'"):
        VideoClips(4, start="middle")


@pytest.mark.parametrize(("fps", "expected_step"), [(12.5, 2.0), (50.0, 0.5), (10.0, 2.5)])
def test_fps_conversion_picks_the_frame_showing_at_each_instant(
    videos: dict[str, tuple[str, bytes]], fps: float, expected_step: float
) -> None:
    _, data = videos["h264"]
    result = numpy_clips(8, fps=fps, clips=2, seed=4)(".mp4", data)
    assert result is not None
    indices = result["indices"]
    for clip in indices:  # frame floor(p * step) at consecutive grid positions p of the new rate
        first = int(clip[0] / expected_step)
        grids = [np.floor((p + np.arange(8)) * expected_step + 1e-6) for p in range(first - 2, first + 3)]
        assert any(np.array_equal(clip, grid) for grid in grids), clip
    np.testing.assert_array_equal(patterns(result["frames"]), indices)


def test_step_and_fps_together(videos: dict[str, tuple[str, bytes]]) -> None:
    _, data = videos["h264"]
    result = numpy_clips(4, fps=12.5, step=3, start="uniform")(".mp4", data)
    assert result is not None
    assert (np.diff(result["indices"][0]) == 6).all()
    np.testing.assert_array_equal(patterns(result["frames"]), result["indices"])


@pytest.mark.parametrize(("size", "shape"), [(32, (32, 32)), ((48, 32), (48, 32)), ((64, 96), (64, 96))])
def test_size_resizes_while_converting(
    videos: dict[str, tuple[str, bytes]], size: Any, shape: tuple[int, int]
) -> None:
    _, data = videos["mpeg4_audio"]
    result = numpy_clips(6, clips=2, size=size, seed=1)(".mp4", data)
    assert result is not None
    assert result["frames"].shape == (2, 6, *shape, 3)
    np.testing.assert_array_equal(patterns(result["frames"]), result["indices"])


def test_shorter_side_keeps_the_aspect_ratio() -> None:
    data = encode_video(10, width=96, height=48, codec="mpeg4")
    result = numpy_clips(2, size=24)(".mp4", data)
    assert result is not None
    assert result["frames"].shape == (1, 2, 24, 48, 3)


def test_a_clip_longer_than_the_video_repeats_the_last_frame(videos: dict[str, tuple[str, bytes]]) -> None:
    _, data = videos["h264"]
    result = numpy_clips(60, step=2)(".mp4", data)
    assert result is not None
    indices = result["indices"][0]
    assert indices[0] == 0 and indices[49] == 98 and (indices[50:] == 99).all()
    np.testing.assert_array_equal(patterns(result["frames"]), result["indices"])


def test_torch_output_types(videos: dict[str, tuple[str, bytes]]) -> None:
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    _, data = videos["h264"]
    result = VideoClips(4, clips=2)(".mp4", data)
    assert result is not None
    assert isinstance(result["frames"], torch.Tensor) and result["frames"].dtype == torch.uint8
    assert result["frames"].shape == (2, 4, 64, 64, 3)
    assert result["indices"].dtype == torch.int64
    np.testing.assert_array_equal(patterns(result["frames"].numpy()), result["indices"].numpy())


def test_other_fields_are_left_to_other_handlers(videos: dict[str, tuple[str, bytes]]) -> None:
    assert numpy_clips(4)(".txt", b"hello") is None
    decoder = Decoder([numpy_clips(4)])
    _, data = videos["h264"]
    out = decoder({"__key__": "k", "mp4": data, "txt": b"caption", "json": b'{"a": 1}'})
    assert out["txt"] == "caption" and out["json"] == {"a": 1}
    assert out["mp4"]["frames"].shape == (1, 4, 64, 64, 3)


def _ctx(epoch: int, seed: int | None = None) -> Any:
    return SimpleNamespace(epoch=epoch, seed=seed, world=None)


def test_random_starts_are_a_pure_function_of_seed_epoch_and_key(
    videos: dict[str, tuple[str, bytes]],
) -> None:
    _, data = videos["h264"]
    clips = numpy_clips(2, clips=4, seed=7)

    def starts(decoder: Decoder, key: str) -> list[int]:
        out = decoder({"__key__": key, "mp4": data})
        return list(out["mp4"]["indices"][:, 0])

    decoder = Decoder([clips])
    epoch0, epoch1 = decoder.bind(_ctx(0)), decoder.bind(_ctx(1))
    assert starts(epoch0, "a") == starts(decoder.bind(_ctx(0)), "a") == starts(decoder, "a")
    assert starts(epoch1, "a") == starts(Decoder([numpy_clips(2, clips=4, seed=7)]).bind(_ctx(1)), "a")
    assert starts(epoch0, "a") != starts(epoch1, "a")
    assert starts(epoch0, "a") != starts(epoch0, "b")
    assert starts(Decoder([numpy_clips(2, clips=4, seed=8)]), "a") != starts(epoch0, "a")
    # Without its own seed the decoder takes the pipeline's.
    unseeded = Decoder([numpy_clips(2, clips=4)])
    assert starts(unseeded.bind(_ctx(0, seed=7)), "a") == starts(epoch0, "a")


def test_decoder_bind_returns_itself_without_bindable_handlers() -> None:
    decoder = Decoder(["rgb8"])
    assert decoder.bind(_ctx(3)) is decoder
    bound = Decoder([numpy_clips(2)]).bind(_ctx(3))
    assert isinstance(bound.handlers[1], VideoClips) and bound.handlers[1]._epoch == 3


def _write_shard(path: Path, samples: list[dict[str, Any]]) -> str:
    with ShardWriter(str(path / "v-%02d.tar"), maxcount=1000) as sink:
        for sample in samples:
            sink.write(sample)
    return str(path / "v-00.tar")


def test_pipeline_epochs_draw_new_clips_and_repeat_them_for_the_same_epoch(
    tmp_path: Path, videos: dict[str, tuple[str, bytes]]
) -> None:
    _, data = videos["h264"]
    url = _write_shard(tmp_path, [{"__key__": f"v{i}", "mp4": data} for i in range(3)])

    def run(epoch: int) -> list[list[int]]:
        ds = ss.WebDataset(url, shardshuffle=False, seed=5).decode(numpy_clips(4, clips=2))
        ds.set_epoch(epoch)
        out = []
        for sample in ds:
            np.testing.assert_array_equal(patterns(sample["mp4"]["frames"]), sample["mp4"]["indices"])
            out.append(sample["mp4"]["indices"][:, 0].tolist())
        return out

    assert run(0) == run(0)
    assert run(0) != run(1)
    assert run(1) == run(1)


def test_torch_video_keeps_webdatasets_shapes(videos: dict[str, tuple[str, bytes]]) -> None:
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    for name in ("h264", "mpeg4_audio", "webm"):
        ext, data = videos[name]
        frames, audio, info = torch_video("." + ext, data)
        assert frames.shape == (FRAMES, 64, 64, 3) and frames.dtype == torch.uint8
        assert patterns(frames[::10].numpy()).tolist() == list(range(0, FRAMES, 10))
        assert audio.dtype == torch.float32 and audio.ndim == 2
        assert info["video_fps"] == 25.0
        if name == "h264":
            assert audio.shape == (1, 0) and "audio_fps" not in info
        else:
            rate = VIDEOS[name][1]["audio_rate"]
            assert info["audio_fps"] == rate
            assert audio.shape[0] == 1 and abs(audio.shape[1] - 4 * rate) < 0.05 * rate
    assert torch_video(".txt", b"x") is None
    sample = ss.Decoder([torch_video])({"__key__": "k", "mp4": videos["h264"][1]})
    assert sample["mp4"][0].shape == (FRAMES, 64, 64, 3)


def test_video_info_reads_headers(videos: dict[str, tuple[str, bytes]]) -> None:
    info = video_info(".mp4", videos["mpeg4_audio"][1])
    assert info is not None
    assert info["codec"] == "mpeg4" and info["width"] == 64 and info["height"] == 64
    assert info["fps"] == 25.0 and info["total_frames"] == FRAMES
    assert info["duration"] == pytest.approx(4.0, abs=0.1)
    assert [(a["codec"], a["sample_rate"], a["channels"]) for a in info["audio"]] == [("aac", 16000, 1)]
    mkv = probe_video(videos["mkv"][1], "mkv")  # frames counted from packets
    assert mkv["total_frames"] == FRAMES and mkv["codec"] == "h264" and mkv["audio"] == []
    assert probe_video(videos["h264"][1])["codec"] == ("h264" if h264_encoder() == "libx264" else "mpeg4")
    assert video_info(".wav", b"RIFF") is None


def test_video_summary_for_stat(videos: dict[str, tuple[str, bytes]]) -> None:
    summary = VideoSummary()
    summary.add("a.mp4", videos["mpeg4_audio"][1])
    summary.add("b.mkv", videos["mkv"][1])
    summary.add("c.mp4", b"garbage")
    text = "\n".join(summary.lines())
    assert "videos:     3:" in text and "mpeg4 x1" in text and "64x64 x2" in text and "25 fps x2" in text
    assert "4.0 / 4.0 / 4.0 s" in text and "200 frames" in text
    assert "aac x1, none x1" in text
    assert "unreadable: 1: c.mp4" in text
    assert VideoSummary().lines() == []


@pytest.fixture(scope="module")
def faststart() -> bytes:
    return encode_video(FRAMES, gop=20, faststart=True)


@pytest.mark.parametrize(
    ("label", "corrupt", "names_codec"),
    [
        ("garbage", lambda data: os.urandom(2000), False),
        ("empty", lambda data: b"", False),
        ("truncated before the index", lambda data: data[: len(data) // 2], False),
        ("truncated after the index", lambda data: data[: len(data) // 2], True),
        ("zeroed frames", lambda data: data[:2000] + bytes(len(data) - 2000), True),
    ],
)
def test_corrupt_videos_raise_decoding_error_naming_key_url_and_codec(
    tmp_path: Path,
    videos: dict[str, tuple[str, bytes]],
    faststart: bytes,
    label: str,
    corrupt: Any,
    names_codec: bool,
) -> None:
    good = videos["h264"][1] if label == "truncated before the index" else faststart
    bad = corrupt(good)
    url = _write_shard(
        tmp_path,
        [
            {"__key__": "good0", "mp4": good},
            {"__key__": "bad", "mp4": bad},
            {"__key__": "good1", "mp4": good},
        ],
    )
    clips = numpy_clips(8, clips=2, start="uniform")
    with pytest.raises(DecodingError) as info:
        list(ss.WebDataset(url, shardshuffle=False).decode(clips))
    message = str(info.value)
    assert "'bad'" in message and url in message, message
    assert info.value.key == "bad" and info.value.url == url
    if names_codec:  # the container opened: the error names the stream's codec
        codec = "h264" if h264_encoder() == "libx264" else "mpeg4"
        assert codec in message, message
    with pytest.warns(UserWarning, match="bad"):
        kept = list(ss.WebDataset(url, shardshuffle=False).decode(clips, handler=ss.warn_and_continue))
    assert [s["__key__"] for s in kept] == ["good0", "good1"]


def test_truncated_stream_is_detected_when_headers_say_more(videos: dict[str, tuple[str, bytes]]) -> None:
    _, data = videos["mkv"]  # Matroska: the stream can be cut anywhere and still open
    cut = data[: len(data) // 3]
    with pytest.raises(DecodingError, match="h264|mpeg4"):
        numpy_clips(8, start="uniform", clips=3)(".mkv", cut)


def test_no_video_stream() -> None:
    from shardstream.decoders._synthetic import encode_tone

    with pytest.raises(DecodingError, match="no video stream"):
        numpy_clips(4)(".mp4", encode_tone(1.0, container="m4a"))


def test_arguments_are_checked() -> None:
    for kw in ({"step": 0}, {"clips": 0}, {"fps": -1}, {"size": (0, 4)}, {"threads": -1}, {"output": "pil"}):
        with pytest.raises(ConfigurationError):
            VideoClips(4, **kw)
    with pytest.raises(ConfigurationError):
        VideoClips(0)
    assert "VideoClips(8, step=2" in repr(VideoClips(8, step=2, output="numpy"))


def test_thread_count_default_is_automatic_outside_workers() -> None:
    assert thread_count(None) == 0 and thread_count(3) == 3


def test_containers_and_their_threads_are_released_without_garbage_collection(
    videos: dict[str, tuple[str, bytes]],
) -> None:
    _, data = videos["h264"]
    clips = numpy_clips(4, threads=2)

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    clips(".mp4", data)
    gc.collect()
    gc.disable()
    try:
        before = threads()
        for _ in range(10):
            clips(".mp4", data)
            decode_video(data, threads=2)
            probe_video(data)
        assert threads() <= before
    finally:
        gc.enable()


def test_clip_decoding_memory_is_bounded_by_the_clips(tmp_path: Path) -> None:
    """Peak RSS of 4 8-frame clips from a 30 s 320x240 video vs decoding all 750 frames."""
    data = encode_video(750, width=320, height=240, gop=50, options={"preset": "ultrafast"})
    path = tmp_path / "long.mp4"
    path.write_bytes(data)
    script = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from shardstream.decoders.clips import VideoClips
        from shardstream.decoders.video import decode_video

        def status(field):  # KiB; VmHWM is this process's peak (ru_maxrss survives exec)
            for line in open("/proc/self/status"):
                if line.startswith(field + ":"):
                    return int(line.split()[1])

        data = Path(sys.argv[1]).read_bytes()
        mode = sys.argv[2]
        VideoClips(1, output="numpy", threads=1)(".mp4", data)  # imports and FFmpeg set-up
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak to the current RSS
        base = status("VmRSS")
        if mode == "clips":
            for seed in range(5):
                out = None
                out = VideoClips(8, clips=4, seed=seed, output="numpy", threads=1)(".mp4", data)
        else:
            frames = decode_video(data, threads=1)[0]
        print(json.dumps({"base": base, "peak": status("VmHWM")}))
        """
    )

    def measure(mode: str) -> dict[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", script, str(path), mode], capture_output=True, text=True, check=True
        )
        result: dict[str, int] = json.loads(out.stdout)
        return result  # KiB

    clips, whole = measure("clips"), measure("whole")
    frames_kib = 750 * 320 * 240 * 3 // 1024  # 169 MiB: every frame, held once (no stacking copy)
    assert frames_kib * 0.95 <= whole["peak"] - whole["base"] < frames_kib * 1.2, (clips, whole)
    # 32 frames of output (7 MiB) plus the decoder's reference frames
    assert clips["peak"] - clips["base"] < (whole["peak"] - whole["base"]) / 8, (clips, whole)


def test_stat_shows_video_members(
    tmp_path: Path, videos: dict[str, tuple[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    from shardstream.cli import main

    url = _write_shard(
        tmp_path,
        [
            {"__key__": "a", "mp4": videos["mpeg4_audio"][1], "txt": "a caption", "json": {"w": 64}},
            {"__key__": "b", "mp4": videos["mpeg4_audio"][1], "txt": "another", "json": {"w": 64}},
        ],
    )
    assert main(["stat", url]) == 0
    out = capsys.readouterr().out
    assert "videos:     2: mpeg4 x2; 64x64 x2; 25 fps x2" in out, out
    assert "duration:   4.0 / 4.0 / 4.0 s (min / median / max), 8 s and 200 frames in all" in out, out
    assert "audio:      aac x2" in out, out
