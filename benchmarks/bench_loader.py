"""bench_loader: ss.Loader (threads, processes) against the decode-only ceiling and the peers.

Three sections (``--only images|tiny|video``, repeatable; default: all three). In each, every case
runs once per round in alternating order (``--rounds``), every pass reading the whole dataset.

**images**: 2,000 256x256 JPEGs decoded to RGB arrays, batches of 32, on this machine's cores:

* **ceiling**: the JPEGs already in memory, half decoded by each of 2 forked processes with no
  pipeline, their two rates added (``ceiling_rate``: the cores' speeds differ at times on this host);
* **webdataset 1.0.2 + DataLoader(2 workers)**: its pipeline with the same decoder as ours;
* **SPDL 0.8.0** as its documentation builds an image loader (``_spdl.py``): its own tar parser
  (``spdl.io.iter_tarfile``), its own decoder (``spdl.io``: FFmpeg's) with
  ``concurrency=num_threads``, ``aggregate(32)``, one batch copy by ``spdl.io.convert_frames``;
  skipped, with a note and an install hint, without spdl or without FFmpeg's libraries;
* **LitData 0.2.76** (``_litdata.py``): the same samples written once by ``litdata.optimize`` into
  its own chunks, read by a ``StreamingDataset`` subclass that decodes in ``__getitem__``, in a
  ``StreamingDataLoader`` with a worker per core;
* **Mosaic Streaming 0.13.0** (``_mosaic.py``): the same samples written once by ``MDSWriter``,
  read by a ``StreamingDataset(local=..., remote=None)`` subclass that decodes in ``__getitem__``,
  in a torch DataLoader with 2 workers;
* **torchdata.nodes 0.11.0** (``_torchdata.py``): shardstream's reader's raw samples,
  ``Batcher(32)``, a thread ``ParallelMapper`` (``--threads``) that decodes and collates each
  batch, ``Prefetcher(2)``, ``Loader``, as its ImageNet benchmark builds it;
* **shardstream WebLoader(2 workers)**: today's torch DataLoader path;
* **ss.Loader, threads**: one process, ``num_threads`` threads for the per-sample stages;
* **ss.Loader, processes**: 2 worker processes (persistent, as the default);
* **ss.Loader, automatic**: neither count given: the loader measures its first batches in thread
  mode and picks threads, processes or both for the cores it may use (``loader/_auto.py``); the
  row's name says what it picked (its first pass includes the measurement and any switch);
* **reference**: the JPEGs already in memory decoded on ``num_threads`` threads straight into
  batches in 5 reused buffers, no reading and no pipeline (``_ceiling.ThreadDecodeBatches``): what
  thread mode could reach if everything but the decode and the writing of batches cost nothing;
* **reference, samples in memory** (simplejpeg only): the thread-mode decode-stage row over the
  raw samples already in memory (``DataPipeline`` over a list): the engine without the tar reader.

Every side but SPDL decodes with the same function (``--decoder simplejpeg`` or ``pillow``),
applied as a ``map_dict`` on the raw ``jpg`` bytes (in the peers' ``__getitem__`` or map), so the
differences are the engines; the report gives SPDL's decoder's CPU per image next to that
function's. The peers are optional: one that is not installed is skipped with a note and its
install line (``benchmarks/README.md`` has them all).
With simplejpeg, three more rows run ss.Loader (threads, processes, automatic) over shardstream's own
``decode("rgb8", jpeg_backend="simplejpeg")`` stage, the same library: a map's function returns
its own array, which collation copies into the batch, while the decode stage lets the loader
decode each JPEG straight into its row of the batch (``decoders/deferred.py``).

**tiny**: 50,000 samples of a ~60-byte JSON label and a 16-byte payload (``--tiny-count``), where
the cost per sample of the engine dominates; the same two functions on every side (label to an
int, payload to a uint8 array), batches of 32. ss.Loader (threads, processes, automatic), WebLoader and
webdataset + DataLoader, 2 workers each, and LitData and Mosaic Streaming over the same samples in
their own formats (built and read as in the images section); the reference is today's WebLoader
(the target: ss.Loader >= 1.5x, printed under the table).

**video**: 96 samples over 24 distinct 8 s 640x360 H.264 videos (``--videos``, ``--video-unique``),
one random 8-frame clip each, decoded by shardstream's ``VideoClips`` stage (seeking, one FFmpeg
thread unless ``--ffmpeg-threads``), batches of 8: ss.Loader (threads, processes, automatic),
WebLoader(2 workers), and webdataset + DataLoader(2 workers). webdataset's own video decoder
(``torch_video``) needs torchvision's ``read_video`` (gone from torchvision) and decodes whole
files; its row calls the same ``VideoClips`` object on each sample in a ``map``, so it measures
webdataset's engine around our decoder. The reference is WebLoader.

Every case first runs one unmeasured pass (``--no-warmup`` skips it). Reported per section:
samples (clips) per second (median over rounds and passes), the ratio to the reference, time from
``iter()`` to the first batch, and the peak PSS and RSS of the whole process tree (``MEMORY_NOTE``;
sampled by a separate process, ``_rss.py``, so that the sampling takes no GIL from the loaders
measured, and once more after a round's last pass, untimed). In
the images section the ceiling is measured again just before every case's round and each case's
share of it is the median over rounds of the round's rate over that ceiling (the host's speed
drifts by 20-30% within a run).
Datasets are built once and cached in ``--data`` (``images``, ``loader-tiny``, ``loader-video``;
other sizes get their own directories).

``ss.Loader``'s thread mode leaves glibc's allocator of its process alone unless asked;
``--tune-malloc`` asks for it in every thread-mode row (``tune_malloc=True``: mallopt is
process-wide and stays, so compare a run with the flag against one without). Worker processes
are tuned in both.

    .venv/bin/python benchmarks/bench_loader.py [--rounds 3] [--only images|tiny|video]
        [--decoder simplejpeg|pillow] [--threads 2] [--tune-malloc] [--markdown F]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    _mark,
    _ready,
    _write_shards,
    build_image_dataset,
    emit_report,
    machine_line,
    shard_paths,
)
from _rss import PSS_SHARE, TreeMemory  # noqa: E402

BATCH = 32
#: ``tune_malloc`` of the thread-mode rows (``--tune-malloc``).
TUNE_MALLOC = False
COUNT = 2_000
SECTIONS = ("images", "tiny", "video")
MEMORY_NOTE = (
    "Memory: the peak over a round of the sum over the process tree (this process and its workers) "
    "of PSS (`/proc/PID/smaps_rollup`: a page shared by N processes counts 1/N in each, so what "
    "forked workers share with their parent counts once) and, beside it, of RSS (which counts a "
    "shared page in every process); the largest round is shown. Sampled by a separate process: "
    f"RSS every 20 ms, PSS as often as keeps that process under {PSS_SHARE:.0%} of one core, and "
    "both once after the round's last pass (untimed)"
)
PEER_IMPORTS_NOTE = (
    "The installed peers' modules are imported in this process before the first round (LitData, "
    "Mosaic Streaming and the transformers it imports, torchdata): what they take counts in every "
    "row's memory, ours included"
)

#: tiny section: (samples, shards) by default.
TINY = (50_000, 10)
#: video section: samples, distinct encodings, samples per shard, clips per batch, frames per clip.
VIDEOS, VIDEO_UNIQUE, VIDEO_PER_SHARD, VIDEO_BATCH, CLIP = 96, 24, 12, 8, 8
SECONDS, FPS, WIDTH, HEIGHT, GOP = 8, 25, 640, 360, 50


def _decoder(name: str) -> Callable[[bytes], Any]:
    if name == "simplejpeg":
        import simplejpeg

        decode_jpeg = simplejpeg.decode_jpeg
        return lambda data: decode_jpeg(bytes(data), colorspace="RGB")
    from PIL import Image

    return lambda data: np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _decoder_into(name: str) -> Callable[[bytes, Any], None]:
    """:func:`_decoder`'s decode into a given row: simplejpeg's ``buffer=`` (as the decode stage
    does), else the decoded array copied in."""
    if name == "simplejpeg":
        import simplejpeg

        decode_jpeg = simplejpeg.decode_jpeg
        return lambda data, out: decode_jpeg(data, colorspace="RGB", buffer=out)
    decode = _decoder(name)

    def copy(data: bytes, out: Any) -> None:
        out[...] = decode(data)

    return copy


# ------------------------------------------------------------------------------------------------
# Datasets of the tiny and video sections (the images are _common's)


def build_tiny(root: Path, count: int, shards: int) -> list[str]:
    """``count`` samples of a ``json`` label and a 16-byte ``bin`` payload (cached in ``root``)."""
    directory = root / ("loader-tiny" if (count, shards) == TINY else f"loader-tiny-{count}-{shards}")
    params = {"kind": "loader-tiny", "count": count, "shards": shards, "version": 1}
    if not _ready(directory, params):

        def gen() -> Iterable[dict[str, Any]]:
            rng = np.random.default_rng(0)
            for i in range(count):
                label = {"label": i % 1000, "id": f"s{i:08d}", "source": "synthetic"}
                yield {"__key__": f"s{i:08d}", "json": label, "bin": rng.bytes(16)}

        _write_shards(directory, "tiny", gen(), per_shard=-(-count // shards))
        _mark(directory, params)
    return shard_paths(directory, "tiny", shards)


def build_video(root: Path, videos: int, unique: int) -> list[str]:
    """``videos`` samples (``mp4`` + ``json`` + ``txt``) over ``unique`` encodings (cached in ``root``)."""
    from shardstream.decoders._synthetic import encode_video

    default = (videos, unique) == (VIDEOS, VIDEO_UNIQUE)
    directory = root / ("loader-video" if default else f"loader-video-{videos}-{unique}")
    params = {
        "kind": "loader-video", "videos": videos, "unique": unique, "seconds": SECONDS, "fps": FPS,
        "size": [WIDTH, HEIGHT], "gop": GOP, "per_shard": VIDEO_PER_SHARD, "version": 1,
    }  # fmt: skip
    shards = -(-videos // VIDEO_PER_SHARD)
    if not _ready(directory, params):
        rng = np.random.default_rng(0)
        encoded = []
        for i in range(unique):
            texture = rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8 * 2, 3), dtype=np.uint8)
            texture = texture.repeat(8, 0).repeat(8, 1)
            print(f"  encoding video {i + 1}/{unique} ({SECONDS} s {WIDTH}x{HEIGHT}, gop {GOP})", flush=True)
            data = encode_video(
                SECONDS * FPS, fps=FPS, width=WIDTH, height=HEIGHT, gop=GOP, texture=texture,
                options={"preset": "veryfast"}, faststart=True,
            )  # fmt: skip
            encoded.append(data)

        def gen() -> Iterable[dict[str, Any]]:
            for k in range(videos):
                meta = {"duration": SECONDS, "source": k % unique}
                yield {"__key__": f"vid{k:06d}", "mp4": encoded[k % unique], "json": meta, "txt": str(k)}

        _write_shards(directory, "video", gen(), per_shard=VIDEO_PER_SHARD)
        _mark(directory, params)
    return shard_paths(directory, "video", shards)


# ------------------------------------------------------------------------------------------------
# Per-sample functions, the same on every side (module level: picklable for worker processes)


def tiny_label(data: bytes) -> int:
    return int(json.loads(bytes(data))["label"])


def tiny_payload(data: bytes) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.frombuffer(bytearray(data), dtype=np.uint8)  # writable: torch warns on read-only arrays


def clip_frames(sample: tuple[Any, Any]) -> tuple[Any, Any]:
    """(VideoClips' dict, key) to (the clip's frames, key): ``num_frames x H x W x 3``."""
    clip, key = sample
    return clip["frames"][0], key


class ClipSample:
    """The webdataset side: the same VideoClips decoder, called on each sample's ``mp4`` field."""

    def __init__(self, clips: Any) -> None:
        self.clips = clips

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        sample["mp4"] = self.clips.decode_in_sample(".mp4", sample["mp4"], sample)
        return sample


# ------------------------------------------------------------------------------------------------
# Measurement


class Case:
    """A loader made once per round; a pass iterates it once (workers persist between passes).
    ``notes``: lines the report prints under its section's heading (how a peer is built).
    ``chose``: for ``ss.Loader``'s automatic rows, what it picked in each round (the row's name
    in the report lists them)."""

    def __init__(
        self, name: str, make: Callable[[], Any], expect: int = COUNT, notes: tuple[str, ...] = ()
    ) -> None:
        self.name, self.make, self.expect, self.notes = name, make, expect, notes
        self.chose: list[str] = []
        self.rates: list[float] = []
        self.first: list[float] = []
        self.pss: list[int] = []  # the peak PSS of the process tree in each round
        self.rss: list[int] = []  # the peak RSS of the process tree in each round
        self.ceilings: list[float] = []  # the ceiling measured just before each of its rounds

    def warm_up(self) -> None:
        """One unmeasured pass of a loader made for it, with the memory sampler running as in a
        round (imports, the page cache and shardstream's forkserver start land here)."""
        with TreeMemory():
            loader = self.make()
            try:
                for _ in loader:
                    pass
            finally:
                shut(loader)

    def round(self, passes: int) -> None:
        with TreeMemory() as memory:
            loader = self.make()
            try:
                for _ in range(passes):
                    t0 = time.perf_counter()
                    n, first = 0, None
                    for batch in loader:
                        if first is None:
                            first = time.perf_counter() - t0
                        n += len(batch[1])
                    wall = time.perf_counter() - t0
                    if n != self.expect:
                        raise RuntimeError(f"{self.name} yielded {n} samples, expected {self.expect}")
                    self.rates.append(n / wall)
                    self.first.append(first or 0.0)
                # One reading of the whole tree's PSS besides the sampler's own (see _rss), with
                # the loader and its workers still alive; after the last pass, so that a loader
                # that prefetches the next epoch gains no head start on a timed pass.
                memory.sample()
                picked = automatic_choice(loader)
                if picked is not None:
                    self.chose.append(picked)
            finally:
                shut(loader)
        self.pss.append(memory.pss)
        self.rss.append(memory.rss)


class Skipped(NamedTuple):
    """A row left out of a run (an optional peer that is not installed): the report says why."""

    name: str
    why: str


def automatic_choice(loader: Any) -> str | None:
    """What an ``ss.Loader`` in its automatic mode picked (``"2 processes x 1 thread"``), or
    ``None`` for any other loader."""
    import shardstream as ss

    if not isinstance(loader, ss.Loader):
        return None
    auto = loader.stats()["auto"]
    if auto is None:
        return None
    if auto["state"] != "chosen":
        return "still measuring"
    if auto["num_workers"] == 0:
        return f"{auto['num_threads']} threads"
    return f"{auto['num_workers']} processes x {auto['num_threads']} thread(s)"


def shut(loader: Any) -> None:
    """Stop a loader's threads and worker processes before the next case starts: ``close()``
    where it has one; a torch DataLoader's persistent workers otherwise live until its iterator
    is garbage-collected, and would be counted in the next case's memory."""
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    else:
        running = getattr(loader, "_iterator", None)
        if running is not None and hasattr(running, "_shutdown_workers"):
            running._shutdown_workers()


# ------------------------------------------------------------------------------------------------
# The images section's rows


@dataclass(frozen=True)
class Images:
    """What every row of the images section is built from."""

    urls: list[str]
    root: Path  # ``--data``: the peers' own formats of the same samples are written under it
    decoder: str  # "simplejpeg" or "pillow": the library of ``decode``
    decode: Callable[[bytes], Any]  # the same function on every side but SPDL's (its own decoder)
    threads: int


def _ours(images: Images) -> Any:
    import shardstream as ss

    return (
        ss.ShardStream(images.urls, shuffle_shards=False).map_dict(jpg=images.decode).to_tuple("jpg", "cls")
    )


def _two_workers() -> dict[str, Any]:
    return {"batch_size": BATCH, "num_workers": 2, "persistent_workers": True}


def webdataset_row(images: Images) -> Case:
    import webdataset
    from torch.utils.data import DataLoader

    def theirs() -> Any:
        dataset = webdataset.WebDataset(images.urls, shardshuffle=False)
        return dataset.map_dict(jpg=images.decode).to_tuple("jpg", "cls")

    return Case("webdataset 1.0.2 + DataLoader(2 workers)", lambda: DataLoader(theirs(), **_two_workers()))


def webloader_row(images: Images) -> Case:
    import shardstream as ss

    return Case("shardstream WebLoader(2 workers)", lambda: ss.WebLoader(_ours(images), **_two_workers()))


def threads_row(images: Images) -> Case:
    import shardstream as ss

    return Case(
        f"ss.Loader, {images.threads} threads",
        lambda: ss.Loader(
            _ours(images), batch_size=BATCH, num_threads=images.threads, tune_malloc=TUNE_MALLOC
        ),
    )


def processes_row(images: Images) -> Case:
    import shardstream as ss

    return Case("ss.Loader, 2 processes", lambda: ss.Loader(_ours(images), batch_size=BATCH, num_workers=2))


def auto_row(images: Images) -> Case:
    """``ss.Loader`` with no counts: it picks for the cores it may use (``loader/_auto.py``)."""
    import shardstream as ss

    return Case("ss.Loader, automatic", lambda: ss.Loader(_ours(images), batch_size=BATCH))


def _staged(images: Images) -> Any:
    """shardstream's own ``decode("rgb8")`` stage with simplejpeg, the same library as the other
    rows' function: it decodes each JPEG straight into its row of the batch (no copy)."""
    import shardstream as ss

    dataset = ss.ShardStream(images.urls, shuffle_shards=False)
    return dataset.decode("rgb8", jpeg_backend="simplejpeg").to_tuple("jpg", "cls")


def stage_threads_row(images: Images) -> Case | None:
    import shardstream as ss

    if images.decoder != "simplejpeg":
        return None
    return Case(
        f"ss.Loader, {images.threads} threads, decode stage",
        lambda: ss.Loader(
            _staged(images), batch_size=BATCH, num_threads=images.threads, tune_malloc=TUNE_MALLOC
        ),
    )


def stage_processes_row(images: Images) -> Case | None:
    import shardstream as ss

    if images.decoder != "simplejpeg":
        return None
    return Case(
        "ss.Loader, 2 processes, decode stage",
        lambda: ss.Loader(_staged(images), batch_size=BATCH, num_workers=2),
    )


def stage_auto_row(images: Images) -> Case | None:
    import shardstream as ss

    if images.decoder != "simplejpeg":
        return None
    return Case("ss.Loader, automatic, decode stage", lambda: ss.Loader(_staged(images), batch_size=BATCH))


def memory_row(images: Images) -> Case | None:
    """A reference row: the thread-mode decode-stage row with its samples already in memory
    (``DataPipeline`` over a list of the raw sample dicts): the same stages, collation and
    threads with no tar reading, so the gap between it and the decode-stage row is the reader's."""
    import shardstream as ss

    if images.decoder != "simplejpeg":
        return None

    def make() -> Any:
        # Read for each round and let go with the loader, as the other reference row's JPEGs.
        samples = [dict(sample) for sample in ss.ShardStream(images.urls, shuffle_shards=False)]
        pipeline = ss.DataPipeline(
            lambda: iter(samples), ss.decode("rgb8", jpeg_backend="simplejpeg"), ss.to_tuple("jpg", "cls")
        )
        return ss.Loader(pipeline, batch_size=BATCH, num_threads=images.threads, tune_malloc=TUNE_MALLOC)

    return Case(f"reference: ss.Loader, {images.threads} threads, decode stage, samples in memory", make)


def bound_row(images: Images) -> Case:
    """The reference row: the JPEGs already in memory decoded on ``threads`` threads straight into
    batches in 5 reused buffers (``_ceiling.ThreadDecodeBatches``): no reading, no pipeline."""
    from _ceiling import ThreadDecodeBatches, load_jpegs

    into = _decoder_into(images.decoder)
    # The JPEGs are read for each round and let go by close(): held for the whole run, they
    # would count in the memory of every other row (forked workers inherit them).
    return Case(
        f"reference: decode only, {images.threads} threads, into 5 reused batches",
        lambda: ThreadDecodeBatches(load_jpegs(images.urls), into, BATCH, images.threads),
    )


def decode_us(decode: Callable[[Any], Any], jpegs: list[bytes]) -> float:
    """CPU microseconds per image of ``decode`` on this thread: the best of 3 passes over ``jpegs``."""
    best = float("inf")
    for _ in range(3):
        c0 = time.thread_time()
        for data in jpegs:
            decode(data)
        best = min(best, time.thread_time() - c0)
    return best / len(jpegs) * 1e6


def _skipped(name: str, why: str, install: str) -> Skipped:
    print(f"{name} row skipped: {why}; install: {install}")
    return Skipped(name, f"{why}; row skipped (install: {install})")


def spdl_row(images: Images) -> Case | Skipped:
    """SPDL 0.8.0 as its documentation builds an image loader (``_spdl``), or why it cannot run."""
    import _spdl
    from _ceiling import load_jpegs

    jpegs = load_jpegs(images.urls[:1])
    why = _spdl.unavailable(jpegs[0])
    if why is not None:
        return _skipped("SPDL 0.8.0", why, _spdl.INSTALL)
    theirs, ours = decode_us(_spdl.decode_one, jpegs), decode_us(images.decode, jpegs)
    threads = images.threads
    notes = (
        "SPDL 0.8.0 as its documentation builds an image loader (`benchmarks/_spdl.py`): each shard "
        "read whole and split by `spdl.io.iter_tarfile`, `pipe(demux_image + decode_packets, "
        f"concurrency={threads})`, `aggregate({BATCH})`, `pipe(convert_frames + to_torch)`, "
        f"`add_sink(3)`, `build(num_threads={threads + 2})`; one epoch per pass (`continuous=True`)",
        f"SPDL decodes with its own decoder (FFmpeg's, through `spdl.io`), not with {images.decoder}: "
        f"{theirs:.0f} us of CPU per 256x256 JPEG on one thread here, against {ours:.0f} us for "
        f"{images.decoder}; its share is of the same {images.decoder} ceiling as every row's",
    )
    return Case(
        f"SPDL 0.8.0 (spdl.io decode), {threads} threads",
        lambda: _spdl.loader(images.urls, threads, BATCH),
        notes=notes,
    )


def _raw_images(urls: list[str]) -> Iterator[dict[str, Any]]:
    """The image samples as the peers' writers take them: the JPEG's bytes and the label as an int."""
    import shardstream as ss

    for sample in ss.ShardStream(urls, shuffle_shards=False):
        yield {"jpg": bytes(sample["jpg"]), "cls": int(bytes(sample["cls"]))}


def litdata_row(images: Images) -> Case | Skipped:
    """LitData 0.2.76 from its own chunks (``_litdata``), or why it cannot run."""
    import _litdata

    name = f"LitData 0.2.76 + StreamingDataLoader({os.cpu_count()} workers)"
    why = _litdata.unavailable()
    if why is not None:
        return _skipped("LitData 0.2.76", why, _litdata.INSTALL)
    directory = _litdata.write(images.root / "images-litdata", _raw_images(images.urls))
    fields = (("jpg", images.decode), ("cls", int))
    notes = (
        "LitData 0.2.76 as its README and its ImageNet streaming benchmark use it "
        "(`benchmarks/_litdata.py`): the same samples written once by `litdata.optimize` into its "
        '`chunk_bytes="64MB"` chunks (JPEG bytes, label as an int), read by a `StreamingDataset` '
        f"subclass whose `__getitem__` decodes with {images.decoder}, in a `StreamingDataLoader` "
        "with `num_workers=os.cpu_count()` (persistent)",
    )
    return Case(name, lambda: _litdata.loader(directory, fields, BATCH), notes=notes)


def mosaic_row(images: Images) -> Case | Skipped:
    """Mosaic Streaming 0.13.0 from MDS shards (``_mosaic``), or why it cannot run."""
    import _mosaic

    why = _mosaic.unavailable()
    if why is not None:
        return _skipped("Mosaic Streaming 0.13.0", why, _mosaic.INSTALL)
    columns = {"jpg": "bytes", "cls": "int"}
    directory = _mosaic.write(images.root / "images-mds", _raw_images(images.urls), columns)
    fields = (("jpg", images.decode), ("cls", int))
    notes = (
        "Mosaic Streaming 0.13.0 as its quick start and concepts pages use it "
        "(`benchmarks/_mosaic.py`): the same samples written once by `MDSWriter` (columns `jpg: "
        "bytes`, `cls: int`; no compression, 64 MiB shards: its defaults), read by a "
        "`StreamingDataset(local=<that directory>, remote=None, batch_size=32)` subclass whose "
        f"`__getitem__` decodes with {images.decoder}, in a torch DataLoader with 2 workers "
        "(persistent); its dataset zoo (`streaming.vision`, `.text`, `.multimodal`) is not "
        "imported (`_mosaic.py` says why)",
    )
    return Case(
        "Mosaic Streaming 0.13.0 + DataLoader(2 workers)",
        lambda: _mosaic.loader(directory, fields, BATCH),
        notes=notes,
    )


class DecodeJpg:
    """torchdata.nodes' map over one raw sample: ``(decode(jpg), cls)``."""

    def __init__(self, decode: Callable[[bytes], Any]) -> None:
        self.decode = decode

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, Any]:
        return self.decode(sample["jpg"]), sample["cls"]


def torchdata_row(images: Images) -> Case | Skipped:
    """torchdata.nodes 0.11.0 over our reader's raw samples (``_torchdata``), or why it cannot run."""
    import _torchdata

    import shardstream as ss

    why = _torchdata.unavailable()
    if why is not None:
        return _skipped("torchdata.nodes 0.11.0", why, _torchdata.INSTALL)
    threads = images.threads
    notes = (
        "torchdata.nodes 0.11.0 as its ImageNet benchmark builds a loader (`benchmarks/_torchdata.py`): "
        "`IterableWrapper` over shardstream's reader of the same shards (raw samples; torchdata "
        f"reads no tar), `Batcher({BATCH})`, `ParallelMapper(decode each sample with "
        f'{images.decoder} + default_collate, num_workers={threads}, method="thread")`, '
        "`Prefetcher(2)`, `Loader`",
    )
    return Case(
        f"torchdata.nodes 0.11.0, {threads} threads",
        lambda: _torchdata.batch_loader(
            ss.ShardStream(images.urls, shuffle_shards=False), DecodeJpg(images.decode), threads, BATCH
        ),
        notes=notes,
    )


#: The images section's rows in table order: the peers, then ours, then the references. A row's
#: factory returns its Case, a Skipped (an optional peer that is not installed) or None (a row
#: that does not apply to this decoder). The first row is the reference of the ratios.
IMAGE_ROWS: tuple[Callable[[Images], Case | Skipped | None], ...] = (
    webdataset_row,
    spdl_row,
    litdata_row,
    mosaic_row,
    torchdata_row,
    webloader_row,
    threads_row,
    processes_row,
    auto_row,
    stage_threads_row,
    stage_processes_row,
    stage_auto_row,
    memory_row,
    bound_row,
)


def image_cases(images: Images) -> tuple[list[Case], list[Skipped]]:
    rows = [row(images) for row in IMAGE_ROWS]
    return [r for r in rows if isinstance(r, Case)], [r for r in rows if isinstance(r, Skipped)]


def _raw_tiny(urls: list[str]) -> Iterator[dict[str, Any]]:
    """The tiny samples as the peers' writers take them: both fields' bytes."""
    import shardstream as ss

    for sample in ss.ShardStream(urls, shuffle_shards=False):
        yield {"json": bytes(sample["json"]), "bin": bytes(sample["bin"])}


#: The tiny section's functions, by field (the same on every side).
TINY_FIELDS = (("json", tiny_label), ("bin", tiny_payload))


def tiny_peers(urls: list[str], root: Path, count: int) -> tuple[list[Case], list[Skipped]]:
    """LitData and Mosaic Streaming over the tiny samples in their own formats (written once
    under ``root``, as in the images section), or why each cannot run."""
    import _litdata
    import _mosaic

    cases: list[Case] = []
    skipped: list[Skipped] = []
    suffix = "" if count == TINY[0] else f"-{count}"
    why = _litdata.unavailable()
    if why is not None:
        skipped.append(_skipped("LitData 0.2.76", why, _litdata.INSTALL))
    else:
        chunks = _litdata.write(root / f"loader-tiny-litdata{suffix}", _raw_tiny(urls))
        cases.append(
            Case(
                f"LitData 0.2.76 + StreamingDataLoader({os.cpu_count()} workers)",
                lambda: _litdata.loader(chunks, TINY_FIELDS, BATCH),
                count,
            )
        )
    why = _mosaic.unavailable()
    if why is not None:
        skipped.append(_skipped("Mosaic Streaming 0.13.0", why, _mosaic.INSTALL))
    else:
        columns = {"json": "bytes", "bin": "bytes"}
        mds = _mosaic.write(root / f"loader-tiny-mds{suffix}", _raw_tiny(urls), columns)
        cases.append(
            Case(
                "Mosaic Streaming 0.13.0 + DataLoader(2 workers)",
                lambda: _mosaic.loader(mds, TINY_FIELDS, BATCH),
                count,
            )
        )
    return cases, skipped


def tiny_cases(urls: list[str], count: int, threads: int) -> list[Case]:
    import webdataset
    from torch.utils.data import DataLoader

    import shardstream as ss

    def ours() -> Any:
        return (
            ss.ShardStream(urls, shuffle_shards=False)
            .map_dict(json=tiny_label, bin=tiny_payload)
            .to_tuple("json", "bin")
        )

    def theirs() -> Any:
        return (
            webdataset.WebDataset(urls, shardshuffle=False)
            .map_dict(json=tiny_label, bin=tiny_payload)
            .to_tuple("json", "bin")
        )

    two = {"batch_size": BATCH, "num_workers": 2, "persistent_workers": True}
    return [
        Case("shardstream WebLoader(2 workers)", lambda: ss.WebLoader(ours(), **two), count),
        Case("webdataset 1.0.2 + DataLoader(2 workers)", lambda: DataLoader(theirs(), **two), count),
        Case(
            f"ss.Loader, {threads} threads",
            lambda: ss.Loader(ours(), batch_size=BATCH, num_threads=threads, tune_malloc=TUNE_MALLOC),
            count,
        ),
        Case("ss.Loader, 2 processes", lambda: ss.Loader(ours(), batch_size=BATCH, num_workers=2), count),
        Case("ss.Loader, automatic", lambda: ss.Loader(ours(), batch_size=BATCH), count),
    ]


def video_cases(urls: list[str], videos: int, threads: int, ffmpeg_threads: int | None) -> list[Case]:
    import webdataset
    from torch.utils.data import DataLoader

    import shardstream as ss

    def clips() -> Any:
        return ss.VideoClips(CLIP, threads=ffmpeg_threads)

    def ours() -> Any:
        return (
            ss.ShardStream(urls, shuffle_shards=False)
            .decode(clips(), only=["mp4"])
            .to_tuple("mp4", "__key__")
            .map(clip_frames)
        )

    def theirs() -> Any:
        return (
            webdataset.WebDataset(urls, shardshuffle=False)
            .map(ClipSample(clips()))
            .to_tuple("mp4", "__key__")
            .map(clip_frames)
        )

    two = {"batch_size": VIDEO_BATCH, "num_workers": 2, "persistent_workers": True}
    return [
        Case("shardstream WebLoader(2 workers)", lambda: ss.WebLoader(ours(), **two), videos),
        Case("webdataset 1.0.2 + DataLoader(2 workers)", lambda: DataLoader(theirs(), **two), videos),
        Case(
            f"ss.Loader, {threads} threads",
            lambda: ss.Loader(ours(), batch_size=VIDEO_BATCH, num_threads=threads, tune_malloc=TUNE_MALLOC),
            videos,
        ),
        Case(
            "ss.Loader, 2 processes",
            lambda: ss.Loader(ours(), batch_size=VIDEO_BATCH, num_workers=2),
            videos,
        ),
        Case("ss.Loader, automatic", lambda: ss.Loader(ours(), batch_size=VIDEO_BATCH), videos),
    ]


def ceiling_rate(urls: list[str], decoder: str) -> float:
    """Samples/s the 2 cores can decode: 2 forked processes each decode half of the in-memory
    JPEGs (best of 3 passes each), and their two rates add up.

    Not the whole set over the slower process's time: on this host one vCPU is at times 5-30%
    slower than the other (pinned with taskset, one thread decoding the same JPEGs: simplejpeg
    374 against 391 us per image, Pillow 515 against 665, minutes apart), and a loader hands
    work to whichever core is free, so the sum is the capacity it competes with. The whole set
    over the slower time read 4,840 or 5,330 samples/s depending on the minute."""
    import multiprocessing

    from _ceiling import load_jpegs

    jpegs = load_jpegs(urls)

    def work(part: list[bytes], out: Any) -> None:
        decode = _decoder(decoder)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for data in part:
                decode(data)
            best = min(best, time.perf_counter() - t0)
        out.put(len(part) / best)

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=work, args=(jpegs[i::2], out)) for i in range(2)]
    for p in procs:
        p.start()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return float(sum(rates))


def run_rounds(
    section: str,
    cases: list[Case],
    args: argparse.Namespace,
    unit: str = "samples",
    before: Callable[[Case], None] | None = None,
) -> None:
    """Every case once per round, the order reversed every other round (A B, B A, ...);
    ``before(case)`` runs just before each case's round (the images section measures the
    ceiling there).

    With ``args.warmup``, every case first runs one unmeasured pass: imports, the page cache and
    the start of shardstream's forkserver (once per process, ~1.5 s) would otherwise land on the
    first measured pass of whichever case comes first.
    """
    rounds, passes = args.rounds, args.passes
    if args.warmup:
        for case in cases:
            case.warm_up()
            print(f"{section} warm-up {case.name}", flush=True)
    for r in range(rounds):
        for case in cases if r % 2 == 0 else cases[::-1]:
            if before is not None:
                before(case)
            case.round(passes)
            print(
                f"{section} round {r + 1} {case.name:<42} "
                f"{statistics.median(case.rates[-passes:]):8,.0f} {unit}/s",
                flush=True,
            )


def share(case: Case, passes: int) -> float:
    """The median over rounds of the case's rate in the round (median of its passes) over the
    ceiling measured just before that round: the host's speed drifts by 20-30% within a run, so
    each round is set against the ceiling of its own minute."""
    rounds = [case.rates[i : i + passes] for i in range(0, len(case.rates), passes)]
    return statistics.median(
        statistics.median(rates) / ceiling for rates, ceiling in zip(rounds, case.ceilings, strict=True)
    )


def table(cases: list[Case], unit: str, refs: list[tuple[str, Case]], passes: int = 0) -> list[str]:
    """Markdown rows: rate, share of the ceiling (when ``passes`` is given: see :func:`share`) and
    of the run's highest ceiling, ratios to each reference, first batch, and the peak PSS and RSS
    of the process tree (the largest over rounds; see ``_rss``)."""
    ceiling = bool(passes)
    best = max((c for case in cases for c in case.ceilings), default=0.0)
    head = f"| loader | {unit}/s |"
    head += " share of the ceiling | share of the best ceiling |" if ceiling else ""
    head += "".join(f" vs {label} |" for label, _ in refs)
    head += " first batch, ms | peak PSS of the tree, MiB | peak RSS of the tree, MiB |"
    lines = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    ref_rates = [statistics.median(ref.rates) for _, ref in refs]
    for case in cases:
        rate = statistics.median(case.rates)
        chose = f" (chose {', '.join(sorted(set(case.chose)))})" if case.chose else ""
        row = f"| {case.name}{chose} | {rate:,.0f} |"
        row += f" {share(case, passes):.0%} | {rate / best:.0%} |" if ceiling else ""
        row += "".join(f" {rate / ref:.2f}x |" for ref in ref_rates)
        row += f" {1000 * statistics.median(case.first):.0f} |"
        row += f" {max(case.pss) / 2**20:,.0f} | {max(case.rss) / 2**20:,.0f} |"
        lines.append(row)
    return lines


AUTO = "ss.Loader, automatic"


def auto_lines(cases: list[Case]) -> list[str]:
    """For each automatic row: its median rate over the best hand-picked ``ss.Loader`` row's over
    the same pipeline (the decode-stage rows for the decode-stage one), against issue 46's target
    of 90%."""
    lines = []
    for auto in cases:
        if not auto.name.startswith(AUTO):
            continue
        suffix = auto.name[len(AUTO) :]
        peers = [
            c
            for c in cases
            if c.name.startswith("ss.Loader, ")
            and not c.name.startswith(AUTO)
            and c.name.endswith(suffix)
            and (suffix or "decode stage" not in c.name)
        ]
        if not peers:
            continue
        best = max(peers, key=lambda c: statistics.median(c.rates))
        ratio = statistics.median(auto.rates) / statistics.median(best.rates)
        chose = ", ".join(sorted(set(auto.chose))) or "?"
        lines.append(
            f"- {auto.name} chose {chose}: {ratio:.0%} of the best hand-picked row ({best.name}); "
            f"target >= 90%: {'met' if ratio >= 0.9 else 'missed'}"
        )
    return lines


# ------------------------------------------------------------------------------------------------
# Sections


def images_section(args: argparse.Namespace) -> list[str]:
    urls = build_image_dataset(args.data)
    images = Images(urls, args.data, args.decoder, _decoder(args.decoder), args.threads)
    cases, skipped = image_cases(images)

    def ceiling_first(case: Case) -> None:
        case.ceilings.append(ceiling_rate(urls, args.decoder))
        print(f"images ceiling {case.ceilings[-1]:,.0f} samples/s", flush=True)

    run_rounds("images", cases, args, before=ceiling_first)
    ceilings = [c for case in cases for c in case.ceilings]
    lines = [
        f"## images: {COUNT:,} 256x256 JPEGs, {args.decoder} on every side but SPDL's, batch {BATCH}",
        "",
        f"- Ceiling: 2 forked processes each decoding half of the JPEGs from memory, no pipeline "
        "(best of 3 passes each; their rates added), measured just before every case's round: "
        f"{statistics.median(ceilings):,.0f} samples/s "
        f"(median; {min(ceilings):,.0f}-{max(ceilings):,.0f}). A case's share is the "
        "median over rounds of its rate over the ceiling measured just before it; its share of the best "
        f"ceiling is its median rate over the run's highest ceiling ({max(ceilings):,.0f}), the "
        "stricter share when the host's speed moves during the run",
        *(f"- {note}" for case in cases for note in case.notes),
        *(f"- {row.name}: {row.why}" for row in skipped),
        f"- {MEMORY_NOTE}. {PEER_IMPORTS_NOTE}",
    ]
    lines += ["", *table(cases, "samples", [("webdataset", cases[0])], args.passes), "", *auto_lines(cases)]
    return lines


def tiny_section(args: argparse.Namespace) -> list[str]:
    urls = build_tiny(args.data, args.tiny_count, args.tiny_shards)
    ours = tiny_cases(urls, args.tiny_count, args.threads)
    peers, skipped = tiny_peers(urls, args.data, args.tiny_count)
    cases = [*ours, *peers]
    run_rounds("tiny", cases, args)
    webloader = cases[0]
    lines = [
        f"## tiny: {args.tiny_count:,} samples (a ~60-byte JSON label + a 16-byte payload), "
        f"{args.tiny_shards} shards, batch {BATCH}",
        "",
        "- the same two functions on every side: `json` to an int label, `bin` to a uint8 array; "
        "2 workers for WebLoader and webdataset",
        "- LitData and Mosaic Streaming read the same samples from their own formats (both fields' "
        "bytes, written once), built and read as in the images section, the two functions applied "
        "in their datasets' `__getitem__`",
        *(f"- {row.name}: {row.why}" for row in skipped),
        f"- {MEMORY_NOTE}. {PEER_IMPORTS_NOTE}",
        "",
        *table(cases, "samples", [("WebLoader", webloader), ("webdataset", cases[1])]),
        "",
    ]
    base = statistics.median(webloader.rates)
    for case in ours[2:]:
        ratio = statistics.median(case.rates) / base
        per_round = statistics.median(a / b for a, b in zip(case.rates, webloader.rates, strict=True))
        verdict = "met" if ratio >= 1.5 else "missed"
        lines.append(
            f"- {case.name}: {ratio:.2f}x today's WebLoader (medians; {per_round:.2f}x as the median "
            f"of the ratios of adjacent passes); target >= 1.5x: {verdict}"
        )
    return lines + auto_lines(cases)


def video_section(args: argparse.Namespace) -> list[str]:
    urls = build_video(args.data, args.videos, args.video_unique)
    cases = video_cases(urls, args.videos, args.threads, args.ffmpeg_threads)
    run_rounds("video", cases, args, unit="clips")
    threads = "FFmpeg's automatic count" if args.ffmpeg_threads is None else args.ffmpeg_threads
    return [
        f"## video: {args.videos} clips of {CLIP} frames from {args.video_unique} distinct {SECONDS} s "
        f"{WIDTH}x{HEIGHT} H.264 videos (keyframe every {GOP} frames), batch {VIDEO_BATCH}",
        "",
        f"- `VideoClips({CLIP}, threads={args.ffmpeg_threads})` (one random clip per video, by "
        f"seeking; FFmpeg threads per decode: {threads}) on every side",
        "- webdataset has no clip decoder of its own (`torch_video` decodes whole files through "
        "torchvision's removed `read_video`): its row runs the same `VideoClips` in a `.map()` on "
        "the raw sample, so it measures webdataset's engine around our decoder",
        f"- {MEMORY_NOTE}",
        "",
        *table(cases, "clips", [("WebLoader", cases[0]), ("webdataset", cases[1])]),
        "",
        *auto_lines(cases),
    ]


def _ffmpeg_threads(text: str) -> int | None:
    return None if text == "default" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=2, help="passes per round (the first counts too)")
    parser.add_argument(
        "--threads", type=int, default=2, help="num_threads of the thread-mode loader (and of SPDL)"
    )
    parser.add_argument("--decoder", choices=["simplejpeg", "pillow"], default="simplejpeg")
    parser.add_argument("--tiny-count", type=int, default=TINY[0], help="samples in the tiny section")
    parser.add_argument("--tiny-shards", type=int, default=TINY[1])
    parser.add_argument("--videos", type=int, default=VIDEOS, help="samples in the video section")
    parser.add_argument(
        "--video-unique", type=int, default=VIDEO_UNIQUE, help="distinct encodings among them"
    )
    parser.add_argument(
        "--ffmpeg-threads",
        type=_ffmpeg_threads,
        default=1,
        help="FFmpeg threads per clip decode (default 1; 'default': VideoClips' own choice)",
    )
    parser.add_argument(
        "--no-warmup", dest="warmup", action="store_false", help="skip the unmeasured pass of every case"
    )
    parser.add_argument(
        "--tune-malloc",
        action="store_true",
        help="thread-mode rows raise glibc's mmap and trim thresholds in this process (tune_malloc=True)",
    )
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    global TUNE_MALLOC
    TUNE_MALLOC = args.tune_malloc
    only = [s for s in SECTIONS if s in (args.only or SECTIONS)]

    command = f".venv/bin/python benchmarks/bench_loader.py --rounds {args.rounds}"
    command += "".join(f" --only {s}" for s in args.only or [])
    if "images" in only:
        command += f" --decoder {args.decoder}"
    for flag, value, default in (
        ("--passes", args.passes, 2),
        ("--threads", args.threads, 2),
        ("--tiny-count", args.tiny_count, TINY[0]),
        ("--tiny-shards", args.tiny_shards, TINY[1]),
        ("--videos", args.videos, VIDEOS),
        ("--video-unique", args.video_unique, VIDEO_UNIQUE),
        ("--ffmpeg-threads", args.ffmpeg_threads, 1),
    ):
        if value != default:
            command += f" {flag} {'default' if value is None else value}"
    if not args.warmup:
        command += " --no-warmup"
    if args.tune_malloc:
        command += " --tune-malloc"
    lines = [
        f"# bench_loader: {', '.join(only)}",
        "",
        f"- date: {time.strftime('%Y-%m-%d')}",
        f"- machine: {machine_line()}",
        f"- command: `{command}`",
        f"- {args.rounds} alternating rounds x {args.passes} passes per section"
        + (", after one unmeasured pass of every case" if args.warmup else "")
        + "; medians over rounds and passes",
        "- allocator of this process (thread-mode rows): "
        + ("tuned (`tune_malloc=True`)" if args.tune_malloc else "left alone (the default)"),
    ]
    sections = {"images": images_section, "tiny": tiny_section, "video": video_section}
    try:
        for name in only:
            lines += ["", *sections[name](args)]
    finally:
        TreeMemory.close()
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
