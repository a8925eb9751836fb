"""Shared fixtures: a clean environment, a shard factory that uses our own writer, and the
loopback servers (SeaweedFS S3, HTTP) that start once per session for every test directory.

An emulator that is not installed skips its tests here and fails them under ``CI=true``
(``_components.require_component``, which every test needing an installed component uses)."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shardstream.tar.sharded_writer import ShardWriter

ENV_PREFIXES = ("SHARDSTREAM_", "WDS_")

# The server helpers live with the integration tests; the contract suite uses them too.
sys.path.insert(0, str(Path(__file__).resolve().parent / "integration"))

from _components import missing, require_component  # noqa: E402
from _servers import running  # noqa: E402


@pytest.fixture(autouse=True)
def _close_cached_sources() -> Iterator[None]:
    """Close the per-process sources a test built (their pools hold sockets to servers that
    may be gone by the next test)."""
    yield
    from shardstream.sources import forget_sources

    for source in forget_sources():
        source.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """SeaweedFS with an S3 gateway on loopback, started once per session and stopped by PID."""
    from _servers import SeaweedS3

    from shardstream.testing.seaweed import weed_binary

    try:
        weed_binary()
    except FileNotFoundError:
        missing("SeaweedFS (`weed`)", "the s3:// tests against a real S3 server")

    with running(SeaweedS3(tmp_path_factory.mktemp("seaweedfs"))) as server:
        yield server


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A threaded loopback HTTP server over a temp dir with Range support and request counts."""
    from _servers import HTTPFileServer

    with running(HTTPFileServer(tmp_path_factory.mktemp("http-root"))) as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """fake-gcs-server (Google Cloud Storage's JSON and XML APIs) on loopback, stopped by PID."""
    from shardstream.testing.fakegcs import FakeGCS, fake_gcs_binary

    try:
        fake_gcs_binary()
    except FileNotFoundError:
        missing("fake-gcs-server", "the gs:// tests against a GCS emulator")

    with running(FakeGCS(tmp_path_factory.mktemp("fake-gcs"))) as server:
        yield server


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Microsoft's Azurite (Blob service) on loopback, stopped by PID; without it (or Node.js)
    the az:// tests skip, or fail under CI=true."""
    from shardstream.testing.azurite import Azurite, azurite_binary

    why = "the az:// tests against the Azure Blob emulator"
    npm = "`bash run.sh setup` installs it with npm, which comes with Node.js"
    require_component("Azurite", why, present=azurite_binary() is not None, install=npm)
    require_component("Node.js (`node`, which runs Azurite)", why, present=shutil.which("node") is not None)
    with running(Azurite(tmp_path_factory.mktemp("azurite"))) as server:
        yield server


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The loopback stand-in for the Hugging Face Hub's HTTP API (with its CDN on a second port)."""
    from shardstream.testing.hub import HubStandIn

    with running(HubStandIn(tmp_path_factory.mktemp("hub"))) as server:
        yield server


@pytest.fixture(scope="session")
def ftp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real FTP server (pyftpdlib, a child process stopped by PID): the fsspec fallback's store."""
    from _ftp import FTPServer

    with running(FTPServer(tmp_path_factory.mktemp("ftp-root"))) as server:
        yield server


@pytest.fixture
def compiled_tar_parse() -> None:
    """The tar reader's compiled fast path (``tar/_cmembers.c``) is built: the test goes on, or is
    skipped here and fails under ``CI=true``."""
    from shardstream.tar import grouping, reader

    require_component(
        "shardstream.tar._cmembers",
        "the tar reader's compiled fast path (built by the editable install with a C compiler)",
        present=reader._plain_members is not None and grouping._group_members is not None,
        install="install a C compiler (gcc) and run `bash run.sh setup` again",
    )


@pytest.fixture(params=["compiled", "python"])
def tar_parse(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The tar reader's two paths, one per test run: the compiled header parse and grouping loop
    (as :func:`compiled_tar_parse` requires them) and the Python code they fall back to, forced
    by leaving the compiled functions out."""
    from shardstream.tar import grouping, reader

    if request.param == "compiled":
        request.getfixturevalue("compiled_tar_parse")
    else:
        monkeypatch.setattr(reader, "_plain_members", None)
        monkeypatch.setattr(grouping, "_group_members", None)
    return str(request.param)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests never see the developer's SHARDSTREAM_*/WDS_* or launcher variables."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIXES) or name in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_LOCALID",
            "SLURM_CPUS_PER_TASK",  # the automatic loader's cores (loader/_cores.py)
            # the cloud stores' own variables (gs://, az://, hf://): tests set what they need
            "STORAGE_EMULATOR_HOST",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "AZURE_STORAGE_CONNECTION_STRING",
            "AZURE_STORAGE_ACCOUNT_NAME",
            "AZURE_STORAGE_ACCOUNT",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_KEY",
            "AZURE_STORAGE_SAS_TOKEN",
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "HF_TOKEN_PATH",
            "HF_ENDPOINT",
            "ALLOW_OBSOLETE",  # WebDataset's switch for @obsolete functions (config.allow_obsolete)
        ):
            monkeypatch.delenv(name, raising=False)
    # This process runs the test servers' threads, so WebLoader's rule (loader/_start.py) would
    # start every worker from the forkserver, where each worker imports the test module again:
    # the loader tests would take twice as long. They fork, as before; the forkserver is tested
    # where it matters: test_worker_start.py (which lifts this), the multi-rank tests (their ranks
    # run the real rule) and the DDP harness.
    monkeypatch.setenv("SHARDSTREAM_WORKER_START", "fork")
    # The CLI's main() configures the "shardstream" logger; do not let one test's level leak.
    logger = logging.getLogger("shardstream")
    level = logger.level
    yield
    logger.setLevel(level)


ShardFactory = Callable[..., tuple[str, list[str]]]


@pytest.fixture
def make_shards(tmp_path: Path) -> ShardFactory:
    """Build shards with ShardWriter; returns (brace spec, keys in write order).

    ``make_shards(counts=[3, 5], fields=lambda shard, i: {...}, name="data")`` writes one shard per
    entry of ``counts`` with that many samples. Default fields: ``txt`` and ``cls``.
    """

    def factory(
        counts: list[int] | None = None,
        fields: Callable[[int, int], dict[str, Any]] | None = None,
        name: str = "data",
        directory: Path | None = None,
    ) -> tuple[str, list[str]]:
        counts = counts or [10, 10, 10]
        out = directory or tmp_path / name
        out.mkdir(parents=True, exist_ok=True)
        keys: list[str] = []
        urls: list[str] = []
        for shard, count in enumerate(counts):
            # One ShardWriter per shard so that each shard has exactly counts[shard] samples.
            with ShardWriter(
                str(out / f"{name}-{shard:06d}-%d.tar"), maxcount=max(count, 1), index=False
            ) as w:
                for i in range(count):
                    key = f"s{shard:03d}_{i:05d}"
                    sample = {
                        "__key__": key,
                        **(fields(shard, i) if fields else {"txt": f"text {shard} {i}", "cls": i}),
                    }
                    w.write(sample)
                    keys.append(key)
            urls.append(str(out / f"{name}-{shard:06d}-0.tar"))
        for shard, count in enumerate(counts):
            if count == 0:
                # ShardWriter writes no file for an empty shard: make an empty (valid) tar.
                Path(urls[shard]).write_bytes(bytes(1024))
        return f"{out}/{name}-{{{0:06d}..{len(counts) - 1:06d}}}-0.tar", keys

    return factory
