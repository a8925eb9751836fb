"""A small forward HTTP proxy for the proxy tests, run as its own process.

``python _connect_proxy.py LOGFILE [USER:PASSWORD]`` prints ``PORT`` on its first line of stdout,
then serves on 127.0.0.1 until killed. It understands what curl and botocore send to a proxy:

- ``CONNECT host:port``: answers 200 and relays bytes both ways (TLS to the origin inside it);
- an absolute-form request (``GET http://host:port/path HTTP/1.1``): sends it to the origin in
  origin form with ``Connection: close`` and relays the answer, then closes (one request per
  connection keeps this proxy small; clients see ``Connection: close`` and reconnect).

With credentials, a request without the right ``Proxy-Authorization`` gets 407. Each request is
appended to LOGFILE as one line, ``METHOD TARGET AUTH`` (AUTH: ``ok``, ``none`` or ``bad``), so
tests can count what went through the proxy.
"""

from __future__ import annotations

import base64
import socket
import sys
import threading
from urllib.parse import urlsplit

LOG_LOCK = threading.Lock()


def _relay(a: socket.socket, b: socket.socket) -> None:
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    t = threading.Thread(target=pump, args=(b, a), daemon=True)
    t.start()
    pump(a, b)
    t.join()


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b"", b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _handle(conn: socket.socket, log: str, auth: str | None) -> None:
    try:
        head, rest = _read_head(conn)
        if not head:
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = [line for line in lines[1:] if line]
        given = next(
            (h.split(":", 1)[1].strip() for h in headers if h.lower().startswith("proxy-authorization:")),
            None,
        )
        state = "none" if given is None else ("ok" if auth and given == auth else "bad")
        with LOG_LOCK, open(log, "a") as f:
            f.write(f"{method} {target} {state}\n")
        if auth is not None and state != "ok":
            conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            return
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
            _relay(conn, upstream)
            return
        parts = urlsplit(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [h for h in headers if not h.lower().startswith(("proxy-authorization:", "connection:"))]
        request = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""]).encode(
            "latin-1"
        )
        upstream = socket.create_connection((parts.hostname, parts.port or 80), timeout=30)
        upstream.sendall(request + rest)
        _relay(conn, upstream)
    except OSError:
        pass
    finally:
        conn.close()


def main() -> None:
    log = sys.argv[1]
    auth = "Basic " + base64.b64encode(sys.argv[2].encode()).decode() if len(sys.argv) > 2 else None
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_handle, args=(conn, log, auth), daemon=True).start()


if __name__ == "__main__":
    main()
