"""Independent proxy servers for the proxy tests, each a subprocess on a free loopback port.

- :class:`ProxyPy`: proxy.py (``python -m proxy``), an HTTP proxy: absolute-form requests and
  ``CONNECT`` tunnels, TLS to the proxy itself with ``--cert-file``/``--key-file``, Basic
  credentials with ``--basic-auth``. Its access log has one line per request or tunnel
  (``... - GET host:port/path - 200 OK ...``, ``... - CONNECT host:port - ...``), written when the
  client's connection closes.
- :class:`PProxy`: pproxy (``python -m pproxy``), a SOCKS4 and SOCKS5 server (SOCKS5 credentials
  with ``#user:password``). With ``-v`` it prints one line per tunnel as it opens
  (``socks5 CLIENT -> HOST:PORT``): the host is the name when the client sent one (socks5h) and
  the address when the client resolved it (socks5, socks4).

Each starts in its own session and is stopped by its PID's process group (proxy.py runs its
acceptors in child processes).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

_START_TIMEOUT = 30.0


class _Server:
    log_path: Path
    proc: subprocess.Popen[bytes]
    marker: str  # what a line of the log about a connection contains

    def _start(self, cmd: list[str], stdout: Path | None = None) -> None:
        if stdout is None:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
            return
        with open(stdout, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait(self, ready: Callable[[], object], what: str) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
                self.stop()
                raise RuntimeError(f"{what} did not start: {log[-2000:]}")
            time.sleep(0.05)

    def lines(self) -> list[str]:
        """The log's lines about connections, oldest first."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [line for line in text.splitlines() if self.marker in line]

    def wait_for(self, text: str, after: int, timeout: float = 10.0) -> list[str]:
        """The lines after the first ``after`` once one of them contains ``text`` (or all of them
        when none does within ``timeout``: the caller's assertion then shows them)."""
        deadline = time.monotonic() + timeout
        while True:
            new = self.lines()[after:]
            if any(text in line for line in new) or time.monotonic() > deadline:
                return new
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class ProxyPy(_Server):
    """proxy.py on 127.0.0.1; ``url`` is ``http://`` or, with ``tls=(cert, key)``, ``https://``
    (with ``credentials`` in it when given)."""

    marker = "access_log"

    def __init__(
        self, root: Path, *, tls: tuple[Path, Path] | None = None, credentials: str | None = None
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "proxy.py.log"
        port_file = root / "proxy.py.port"
        cmd = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0",
               "--port-file", str(port_file), "--num-workers", "1", "--num-acceptors", "1",
               "--log-file", str(self.log_path), "--log-level", "INFO"]  # fmt: skip
        if tls is not None:
            cmd += ["--cert-file", str(tls[0]), "--key-file", str(tls[1])]
        if credentials is not None:
            cmd += ["--basic-auth", credentials]
        self._start(cmd)
        self._wait(lambda: port_file.exists() and port_file.read_text().strip(), "proxy.py")
        self.port = int(port_file.read_text().split()[0])
        userinfo = f"{credentials}@" if credentials else ""
        self.url = f"{'https' if tls else 'http'}://{userinfo}127.0.0.1:{self.port}"


class PProxy(_Server):
    """pproxy serving SOCKS5 and SOCKS4 on 127.0.0.1; ``url(kind)`` is e.g. ``socks5h://127.0.0.1:PORT``."""

    marker = " -> "

    def __init__(self, root: Path, *, credentials: str | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "pproxy.log"
        listen = "socks5+socks4://127.0.0.1:0" + (f"#{credentials}" if credentials else "")
        self._start([sys.executable, "-u", "-m", "pproxy", "-l", listen, "-v"], stdout=self.log_path)
        found: list[int] = []

        def ready() -> bool:
            match = re.search(r"Serving on .*127\.0\.0\.1:(\d+)", self.log_path.read_text(errors="replace"))
            if match:
                found.append(int(match.group(1)))
            return bool(found)

        self._wait(ready, "pproxy")
        self.port = found[0]
        self.credentials = credentials

    def url(self, kind: str, credentials: str | None = None) -> str:
        userinfo = credentials or self.credentials
        return f"{kind}://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}"
