"""Launch Microsoft's Azurite (the Blob service only) on loopback, stop it by PID (for tests and
benchmarks of the ``az://`` source).

``azurite-blob`` is a Node.js program (``npm install azurite``; ``run.sh setup`` puts it in
``<venv>/azurite``). It runs in its own session and process group, so Ctrl-C reaches only the
Python process, which stops the whole group (node may start children) in ``finally``/``__exit__``:
SIGTERM, then SIGKILL after a short grace period. Azurite serves the well-known development
account ``devstoreaccount1`` path-style: ``http://127.0.0.1:PORT/devstoreaccount1/container/blob``.

The helpers (create a container, put and get a blob, a container SAS) sign their requests with
shardstream's own Shared Key code over ``http.client``; azure-storage-blob is not needed.
"""

from __future__ import annotations

import datetime
import http.client
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from ..sources.azure import DEV_ACCOUNT, DEV_KEY, SharedKey, container_sas
from .seaweed import LOOPBACK, free_port, stop_process_group, wait_ready

__all__ = ["Azurite", "azurite_binary"]

log = logging.getLogger(__name__)

_VERSION = "2021-12-02"


def azurite_binary() -> str | None:
    """Path of ``azurite-blob``: in ``<venv>/azurite/node_modules/.bin`` of the running Python,
    else on ``PATH``, else ``None``."""
    candidate = Path(sys.prefix) / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if candidate.exists():
        return str(candidate)
    return shutil.which("azurite-blob")


class Azurite:
    """Azurite's Blob service on 127.0.0.1 and a free port.

    Args:
        data_dir: Azurite's workspace (its database and blob extents) and ``azurite.log`` (created).
        startup_timeout: seconds to wait for the service to answer (default 60).

    Attributes:
        endpoint_url: ``http://127.0.0.1:PORT/devstoreaccount1`` (set by :meth:`start`).
        account_name, account_key: the development account and its well-known key.
        pid: process id of ``azurite-blob`` (leader of its process group), or None when stopped.
    """

    account_name = DEV_ACCOUNT
    account_key = DEV_KEY

    def __init__(self, data_dir: Path | str, *, startup_timeout: float = 60.0) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.endpoint_url = ""
        self._log_file: IO[bytes] | None = None
        self._key = SharedKey(self.account_name, self.account_key)

    # -- life cycle -------------------------------------------------------------------------------

    def start(self) -> Azurite:
        """Start Azurite and wait until it answers; returns ``self``.

        Raises:
            FileNotFoundError: ``azurite-blob`` is not installed.
            RuntimeError: it exited or did not answer within ``startup_timeout``.
        """
        binary = azurite_binary()
        if binary is None:
            raise FileNotFoundError(
                "azurite-blob was not found in <venv>/azurite or on PATH; install it with "
                "`npm install --prefix .venv/azurite azurite` (needs Node.js)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.endpoint_url = f"http://{LOOPBACK}:{self.port}/{self.account_name}"
        args = [
            binary,
            "--blobHost", LOOPBACK,
            "--blobPort", str(self.port),
            "--location", str(self.data_dir / "workspace"),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
            "--disableProductStyleUrl",
        ]  # fmt: skip
        self._log_file = open(self.data_dir / "azurite.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.data_dir,
        )
        log.info("started Azurite pid=%d blob=%s", self.proc.pid, self.endpoint_url)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        def probe() -> object:
            try:
                status, _, _ = self.request("GET", "", query=[("comp", "list")])
            except OSError as exc:  # not listening yet
                return exc
            return None if status == 200 else f"HTTP {status}"

        wait_ready(
            lambda: self.proc,
            probe,
            name="Azurite (azurite-blob)",
            log_path=self.data_dir / "azurite.log",
            timeout=self.startup_timeout,
            interval=0.2,
        )

    def stop(self, timeout: float = 3.0) -> None:
        """Stop Azurite's process group by PID: SIGTERM, then SIGKILL after ``timeout`` s. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_group(proc, timeout)
            log.info("stopped Azurite pid=%d", proc.pid)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Azurite(endpoint_url={self.endpoint_url!r}, pid={self.pid})"

    # -- configuration for clients ----------------------------------------------------------------

    @property
    def connection_string(self) -> str:
        """A connection string for this server (Shared Key, path-style endpoint)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account_name};"
            f"AccountKey={self.account_key};BlobEndpoint={self.endpoint_url};"
        )

    @property
    def storage_options(self) -> dict[str, Any]:
        """``storage_options`` for shardstream's ``az://`` source (a new dict)."""
        return self.options_for()

    def options_for(self, *, endpoint_url: str | None = None, **extra: Any) -> dict[str, Any]:
        """``storage_options`` for another endpoint (a proxy: ``{url}/devstoreaccount1``), plus ``extra``."""
        return {
            "account_name": self.account_name,
            "account_key": self.account_key,
            "endpoint_url": endpoint_url or self.endpoint_url,
            **extra,
        }

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for Azure tools (and the ``az://`` source) to reach this server."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}

    def sas_token(
        self,
        container: str,
        permissions: str = "rl",
        expiry: datetime.datetime | datetime.timedelta = datetime.timedelta(hours=1),
    ) -> str:
        """A container SAS (``sr=c``) signed with the account key; ``expiry`` is a UTC time or a
        delay from now (negative: already expired)."""
        if isinstance(expiry, datetime.timedelta):
            expiry = datetime.datetime.now(datetime.timezone.utc) + expiry
        return container_sas(self._key, container, permissions=permissions, expiry=expiry)

    # -- helpers ----------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One Shared Key signed request to ``/devstoreaccount1/{path}`` (``path`` percent-encoded
        here); returns status, lower-cased headers and body."""
        sent = {"x-ms-version": _VERSION, **(headers or {})}
        if body is not None:
            sent["Content-Length"] = str(len(body))
        target_path = f"/{self.account_name}" + (f"/{quote(path, safe='/~')}" if path else "")
        query_string = self._key.authorize(method, target_path, query or [], sent)
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=30)
        try:
            conn.request(method, target_path + (f"?{query_string}" if query_string else ""), body, sent)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def _check(self, what: str, answer: tuple[int, dict[str, str], bytes], *ok: int) -> bytes:
        status, headers, body = answer
        if status not in ok:
            code = headers.get("x-ms-error-code", "")
            raise RuntimeError(f"Azurite: {what} failed: HTTP {status} {code} {body[:300]!r}")
        return body

    def create_container(self, name: str) -> str:
        """Create container ``name`` (if missing); returns it."""
        self._check(
            f"create container {name!r}",
            self.request("PUT", name, query=[("restype", "container")]),
            201,
            409,
        )
        return name

    def put_blob(self, container: str, key: str, data: bytes) -> str:
        """Upload ``data`` as a block blob; returns ``az://container/key``."""
        answer = self.request("PUT", f"{container}/{key}", headers={"x-ms-blob-type": "BlockBlob"}, body=data)
        self._check(f"put {container}/{key}", answer, 201)
        return f"az://{container}/{key}"

    def get_blob(self, container: str, key: str) -> bytes:
        """Download a blob (RuntimeError when it is missing)."""
        return self._check(f"get {container}/{key}", self.request("GET", f"{container}/{key}"), 200)

    def blob_exists(self, container: str, key: str) -> bool:
        """Whether the blob exists (committed)."""
        return self.request("HEAD", f"{container}/{key}")[0] == 200
