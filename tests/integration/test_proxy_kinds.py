"""HTTP, HTTPS and SOCKS proxies as curl has them, through independent proxy servers.

proxy.py (plain, and with TLS to the proxy itself) and pproxy (SOCKS4 and SOCKS5) run as
subprocesses (``_proxy_servers.py``) and log each connection they carry, so every case shows
that its bytes went through the proxy it names. The origins are a loopback HTTP server and an
HTTPS one with a certificate of a test CA (``trustme``), addressed as ``localhost`` so that the
SOCKS proxy's log tells whether the client sent the name (socks5h) or an address it resolved
itself (socks5, socks4).

The in-process cases drive the three clients that connect (``net.pool``'s streams,
``net.whole``'s whole bodies and ``net.multiplex``'s epoll loop) with :class:`Proxies` built
directly. The environment cases run in a fresh process each (``_proxy_job.py``) with only the
variables under test set, since the sources read the environment when they are built.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _procs import run_in_session
from _proxy_servers import PProxy, ProxyPy
from _servers import HTTPFileServer

from shardstream.net.multiplex import Multiplexer
from shardstream.net.pool import ConnectionPool
from shardstream.net.proxy import Proxies, ProxyError
from shardstream.net.whole import WholeBodyPool, render_request
from shardstream.tar import TarWriter

trustme = pytest.importorskip("trustme")
pytest.importorskip("socks")  # PySocks, the [socks] extra

HERE = Path(__file__).resolve().parent
#: Larger than a TLS record and than the whole-body client's buffer: several reads each way.
BODY = bytes(range(256)) * 800
CLIENTS = ("pool", "whole", "multiplex")
#: Every variable a case could inherit from the machine running the tests.
NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
         "AWS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")  # fmt: skip


@dataclass
class Pki:
    bundle: Path  # the test CA, for clients
    cert: Path  # a certificate for localhost and 127.0.0.1, and its key, for servers
    key: Path
    server: ssl.SSLContext  # the HTTPS origin's
    client: ssl.SSLContext  # trusts the test CA


@dataclass
class Servers:
    plain: ProxyPy  # http://
    tls: ProxyPy  # https://
    socks: PProxy  # socks4:// and socks5(h)://


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    root = tmp_path_factory.mktemp("pki")
    bundle, cert, key = root / "ca.pem", root / "cert.pem", root / "key.pem"
    ca.cert_pem.write_to_path(str(bundle))
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(server)
    return Pki(bundle, cert, key, server, ssl.create_default_context(cafile=str(bundle)))


@pytest.fixture(scope="module")
def origins(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HTTPFileServer]]:
    root = tmp_path_factory.mktemp("origins")
    started: dict[str, HTTPFileServer] = {}
    try:
        for scheme, context in (("http", None), ("https", pki.server)):
            server = HTTPFileServer(root / scheme, ssl_context=context)
            server.start()
            started[scheme] = server
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def servers(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("proxies")
    started: list[ProxyPy | PProxy] = []
    try:
        started.append(ProxyPy(root / "plain"))
        started.append(ProxyPy(root / "tls", tls=(pki.cert, pki.key)))
        started.append(PProxy(root / "socks"))
        plain, tls, socks = started
        assert isinstance(plain, ProxyPy) and isinstance(tls, ProxyPy) and isinstance(socks, PProxy)
        yield Servers(plain, tls, socks)
    finally:
        for server in started:
            server.stop()


def _via(servers: Servers, kind: str) -> tuple[ProxyPy | PProxy, str]:
    """The server of a proxy kind and its URL."""
    if kind == "http":
        return servers.plain, servers.plain.url
    if kind == "https":
        return servers.tls, servers.tls.url
    return servers.socks, servers.socks.url(kind)


def _logged(kind: str, scheme: str, port: int, path: str) -> str:
    """What the proxy's log says about a request for ``scheme://localhost:port/path``."""
    if kind in ("http", "https"):  # absolute form for http origins, a CONNECT tunnel for https
        return f"GET localhost:{port}/{path}" if scheme == "http" else f"CONNECT localhost:{port}"
    return f"-> {'localhost' if kind == 'socks5h' else '127.0.0.1'}:{port}"  # who resolved the name


def _fetch(
    client: str, proxies: Proxies, context: ssl.SSLContext, scheme: str, port: int, path: str
) -> bytes:
    """GET ``scheme://localhost:port/path`` with one of the three clients, on new connections."""
    key = (scheme, "localhost", port)
    if client == "pool":
        pool = ConnectionPool(ssl_context=context, proxies=proxies, connect_timeout=5, read_timeout=10)
        try:
            body = pool.request("GET", f"{scheme}://localhost:{port}/{path}")
            assert body.response.status == 200, body.response.status
            data = bytearray()
            buffer = bytearray(1 << 16)
            while n := body.readinto(memoryview(buffer)):
                data += buffer[:n]
            return bytes(data)
        finally:
            pool.close()
    whole = WholeBodyPool(
        ssl_context=context, proxies=proxies, connect_timeout=5, response_timeout=10, read_timeout=10
    )
    try:
        if client == "whole":
            sink = bytearray()
            response = whole.get(key, f"/{path}", {"Host": f"localhost:{port}"}, sink)
            assert response.status == 200, response.status
            return bytes(sink)
        multi = Multiplexer(whole)
        try:
            failed = multi.submit(path, key, render_request("GET", f"/{path}", {"Host": f"localhost:{port}"}))
            answers = [failed] if failed is not None else []
            deadline = time.monotonic() + 20
            while not answers and time.monotonic() < deadline:
                answers = multi.wait(1.0)
            assert answers, "no answer from the epoll loop"
            answer = answers[0]
            if answer.error is not None:
                raise answer.error
            assert answer.status == 200, answer
            return answer.body
        finally:
            multi.close()
    finally:
        whole.close()


@pytest.mark.parametrize("kind", ["http", "https", "socks4", "socks5", "socks5h"])
def test_every_client_reaches_both_origins_through(
    kind: str, servers: Servers, origins: dict[str, HTTPFileServer], pki: Pki
) -> None:
    server, url = _via(servers, kind)
    proxies = Proxies(http=url, https=url, http_variable="ALL_PROXY", https_variable="ALL_PROXY")
    for scheme, origin in origins.items():
        for client in CLIENTS:
            path = f"{kind}/{scheme}-{client}.bin"
            origin.write(path, BODY)
            before = len(server.lines())
            assert _fetch(client, proxies, pki.client, scheme, origin.port, path) == BODY, (client, scheme)
            assert origin.gets(path) == 1
            expected = _logged(kind, scheme, origin.port, path)
            new = server.wait_for(expected, before)  # (proxy.py logs a connection once it closes)
            assert any(expected in line for line in new), (client, scheme, expected, new)


def test_socks4a_sends_the_name_to_the_proxy(
    servers: Servers, origins: dict[str, HTTPFileServer], pki: Pki
) -> None:
    """pproxy has no SOCKS4a: it takes the request's placeholder address 0.0.0.x for the target
    (and logs it), so the tunnel fails; what this shows is that the name was not resolved here,
    as it was for socks4 above (the log shows 127.0.0.1 there)."""
    origin = origins["http"]
    origin.write("socks4a.bin", BODY)
    proxies = Proxies(http=servers.socks.url("socks4a"), http_variable="ALL_PROXY")
    before = len(servers.socks.lines())
    with pytest.raises(OSError):
        _fetch("pool", proxies, pki.client, "http", origin.port, "socks4a.bin")
    new = servers.socks.wait_for(f"-> 0.0.0.1:{origin.port}", before)
    assert any(f"-> 0.0.0.1:{origin.port}" in line for line in new), new
    assert origin.gets("socks4a.bin") == 0


def test_credentials_are_sent_and_never_shown(
    tmp_path: Path, origins: dict[str, HTTPFileServer], pki: Pki
) -> None:
    for origin in origins.values():
        origin.write("auth.bin", BODY)
    started: list[ProxyPy | PProxy] = []
    try:
        started.append(ProxyPy(tmp_path / "http", credentials="user:s3cr3t"))
        started.append(PProxy(tmp_path / "socks", credentials="user:s3cr3t"))
        http_proxy, socks_proxy = started
        assert isinstance(http_proxy, ProxyPy) and isinstance(socks_proxy, PProxy)
        for url in (http_proxy.url, socks_proxy.url("socks5h")):
            # Wrong credentials first: pproxy lets an address in without any for a while after
            # a right login from it.
            bad_url = url.replace("s3cr3t", "wrong")
            bad = Proxies(http=bad_url, https=bad_url, http_variable="http_proxy", https_variable="ALL_PROXY")
            for (scheme, origin), variable in zip(origins.items(), ("http_proxy", "ALL_PROXY"), strict=True):
                with pytest.raises(ProxyError) as refused:
                    _fetch("pool", bad, pki.client, scheme, origin.port, "auth.bin")
                message = str(refused.value)
                assert variable in message and "user and password" in message, message
                assert "wrong" not in message and "s3cr3t" not in message, message
                if url.startswith("http"):
                    assert "407" in message, message
            good = Proxies(http=url, https=url)
            for scheme, origin in origins.items():
                got = _fetch("pool", good, pki.client, scheme, origin.port, "auth.bin")
                assert got == BODY, (url, scheme)
            assert "s3cr3t" not in repr(good) and "s3cr3t" not in repr(good.route("https", "localhost", 1))
    finally:
        for server in started:
            server.stop()


def test_an_https_proxy_is_verified_with_the_sources_cas(
    servers: Servers, origins: dict[str, HTTPFileServer]
) -> None:
    origin = origins["https"]
    origin.write("verify.bin", BODY)
    proxies = Proxies(https=servers.tls.url)
    with pytest.raises(ProxyError) as untrusted:
        _fetch("whole", proxies, ssl.create_default_context(), "https", origin.port, "verify.bin")
    message = str(untrusted.value)
    assert f"https://127.0.0.1:{servers.tls.port}" in message and "HTTPS_PROXY" in message, message
    assert "does not verify" in message and "REQUESTS_CA_BUNDLE" in message, message
    assert origin.gets("verify.bin") == 0


# -- through the environment, in a fresh process each ----------------------------------------------


def _shard(tag: str) -> bytes:
    import io

    buf = io.BytesIO()
    with TarWriter(buf) as tar:
        for i in range(3):
            tar.write({"__key__": f"{tag}-{i}", "txt": tag})
    return buf.getvalue()


def _run(job: dict[str, Any], env: dict[str, str], workdir: Path) -> dict[str, Any]:
    job_file, out_file = workdir / "job.json", workdir / "out.json"
    job_file.write_text(json.dumps(job))
    clean = {k: v for k, v in os.environ.items() if k.upper() not in NAMES}
    code, output = run_in_session(
        [sys.executable, str(HERE / "_proxy_job.py"), str(job_file), str(out_file)],
        cwd=HERE,
        env={**clean, **env},
        timeout=120,
    )
    assert code == 0, output[-3000:]
    return json.loads(out_file.read_text())  # type: ignore[no-any-return]


def _urls(origins: dict[str, HTTPFileServer], host: str, tag: str) -> list[str]:
    urls = []
    for scheme, origin in origins.items():
        origin.write(f"env/{tag}-{scheme}.tar", _shard(f"{tag}-{scheme}"))
        urls.append(f"{scheme}://{host}:{origin.port}/env/{tag}-{scheme}.tar")
    return urls


def test_the_issues_examples_from_the_environment(
    servers: Servers, origins: dict[str, HTTPFileServer], pki: Pki, tmp_path: Path
) -> None:
    """``HTTPS_PROXY=https://...`` (with ``HTTP_PROXY`` the same) and ``ALL_PROXY=socks5h://...``:
    both origins are read, through the proxy."""
    cases = [
        ("https", {"HTTPS_PROXY": servers.tls.url, "HTTP_PROXY": servers.tls.url}),
        ("socks5h", {"ALL_PROXY": servers.socks.url("socks5h")}),
    ]
    for kind, env in cases:
        server, _ = _via(servers, kind)
        urls = _urls(origins, "localhost", kind)
        before = len(server.lines())
        out = _run({"each": urls}, {**env, "REQUESTS_CA_BUNDLE": str(pki.bundle)}, tmp_path)
        expected_keys = [[f"{kind}-{scheme}-{i}" for i in range(3)] for scheme in origins]
        assert [result.get("keys") for result in out["each"]] == expected_keys, out
        for scheme, origin in origins.items():
            expected = _logged(kind, scheme, origin.port, f"env/{kind}-{scheme}.tar")
            assert any(expected in line for line in server.wait_for(expected, before)), (kind, expected)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port bound and never listening (connections to it are refused), kept for the test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def test_no_proxy_first_and_an_unusable_proxy_fails_only_its_hosts(
    origins: dict[str, HTTPFileServer], pki: Pki, tmp_path: Path, refused_port: int
) -> None:
    """A SOCKS proxy without PySocks (its import blocked in the child) and an https:// proxy that
    is down: the hosts that ``NO_PROXY`` lists are read directly, and each of the others fails
    with a message naming the variable its proxy came from, without the credentials."""
    dead = refused_port
    env = {
        "ALL_PROXY": "socks5h://user:s3cr3t@127.0.0.1:1080",
        "HTTPS_PROXY": f"https://user:s3cr3t@127.0.0.1:{dead}",
        "NO_PROXY": "127.0.0.1",
        "REQUESTS_CA_BUNDLE": str(pki.bundle),
        "SHARDSTREAM_RETRIES": "1",
    }
    urls = _urls(origins, "127.0.0.1", "direct") + _urls(origins, "localhost", "proxied")
    out = _run({"each": urls, "block": ["socks"]}, env, tmp_path)
    direct_http, direct_https, socks_http, down_https = out["each"]
    assert direct_http.get("keys") == [f"direct-http-{i}" for i in range(3)], out
    assert direct_https.get("keys") == [f"direct-https-{i}" for i in range(3)], out
    missing = socks_http.get("error", "")
    assert "ALL_PROXY" in missing and "socks5h://127.0.0.1:1080" in missing, missing
    assert "pip install 'shardstream[socks]'" in missing and urls[2] in missing, missing
    down = down_https.get("error", "")
    assert "HTTPS_PROXY" in down and f"https://127.0.0.1:{dead}" in down and "refused" in down, down
    assert urls[3] in down, down
    for message in (missing, down):
        assert "s3cr3t" not in message and "user:" not in message, message
