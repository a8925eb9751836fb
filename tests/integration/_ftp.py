"""A real FTP server (pyftpdlib) on loopback, for the fsspec fallback source's tests.

It runs as a child process in its own process group (``python -m pyftpdlib``), with one user that
may write, passive data connections on a fixed port range (so a test can count them), and is
stopped by PID.
"""

from __future__ import annotations

import ftplib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from shardstream.testing.seaweed import LOOPBACK, free_ports, stop_process_group

__all__ = ["FTPServer"]


class FTPServer:
    """``python -m pyftpdlib`` serving ``root`` on a free loopback port.

    Attributes:
        root: the served directory (write into it directly to put objects).
        port: the control port.
        user, password: the one login (write access).
        passive: the passive data port range.
    """

    user = "shard"
    password = "ftp-secret-pw"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        ports = free_ports(5)
        self.port = ports[0]
        low = 40000 + (os.getpid() * 7) % 20000
        self.passive = range(low, low + 50)
        self._proc: subprocess.Popen[bytes] | None = None
        del ports

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def storage_options(self) -> dict[str, object]:
        """What fsspec's FTP filesystem needs (the URL carries host and port)."""
        return {"username": self.user, "password": self.password}

    def url(self, path: str) -> str:
        return f"ftp://{LOOPBACK}:{self.port}/{path.lstrip('/')}"

    def start(self, timeout: float = 30.0) -> FTPServer:
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pyftpdlib",
                "-i",
                LOOPBACK,
                "-p",
                str(self.port),
                "-w",
                "-d",
                str(self.root),
                "-u",
                self.user,
                "-P",
                self.password,
                "-r",
                f"{self.passive.start}-{self.passive.stop - 1}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with ftplib.FTP() as ftp:
                    ftp.connect(LOOPBACK, self.port, timeout=2)
                    ftp.login(self.user, self.password)
                return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the FTP server on port {self.port} did not start") from None
                time.sleep(0.1)

    def data_connections(self) -> int:
        """Open passive data connections at the server (ESTABLISHED on the passive range)."""
        if self._proc is None:
            return 0
        try:
            conns = psutil.Process(self._proc.pid).net_connections(kind="tcp")
        except psutil.Error:
            return 0
        return sum(1 for c in conns if c.status == psutil.CONN_ESTABLISHED and c.laddr.port in self.passive)

    def stop(self, timeout: float = 3.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process_group(proc, timeout)

    def __enter__(self) -> FTPServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
