"""Proxies and CA bundles from the environment, as curl and botocore honour them, on every path.

A small forward proxy of our own (``_connect_proxy.py``: CONNECT tunnels and absolute-form
requests, optional Basic credentials) logs what goes through it, including botocore's requests
for S3 (independent proxy servers, and https:// and SOCKS proxies: ``test_proxy_kinds.py``); a
loopback HTTPS server presents a certificate of a test CA (``trustme``); SeaweedFS is the S3
store. Each case runs in a fresh process (``_proxy_job.py``) with only the variables under test
set, since sources read the environment when they are built.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _components import require_module
from _procs import run_in_session
from _servers import HTTPFileServer, SeaweedS3

from shardstream.net.proxy import Proxies
from shardstream.tar import TarWriter

HERE = Path(__file__).resolve().parent
trustme = require_module("trustme", "TLS through proxies (test certificates from trustme)")
NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
         "AWS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")  # fmt: skip


def _shard(tag: str) -> bytes:
    buf = io.BytesIO()
    with TarWriter(buf) as tar:
        for i in range(3):
            tar.write({"__key__": f"{tag}-{i}", "txt": tag})
    return buf.getvalue()


class Proxy:
    """The proxy process: ``url`` (with credentials when given), ``log()`` of its requests."""

    def __init__(self, root: Path, credentials: str | None = None) -> None:
        self.log_path = root / "proxy.log"
        self.log_path.write_text("")
        cmd = [sys.executable, str(HERE / "_connect_proxy.py"), str(self.log_path)]
        self.proc = subprocess.Popen(
            [*cmd, *([credentials] if credentials else [])], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        port = int(self.proc.stdout.readline())
        self.url = f"http://{credentials + '@' if credentials else ''}127.0.0.1:{port}"

    def log(self) -> list[str]:
        return self.log_path.read_text().splitlines()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    p = Proxy(tmp_path)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HTTPFileServer, str]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    root = tmp_path_factory.mktemp("tls")
    bundle = root / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    import ssl

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    server = HTTPFileServer(root / "files", ssl_context=ctx)
    server.start()
    try:
        yield server, str(bundle)
    finally:
        server.stop()


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


def test_https_through_a_connect_tunnel_with_a_ca_bundle(
    tls: tuple[HTTPFileServer, str], proxy: Proxy, tmp_path: Path
) -> None:
    server, bundle = tls
    url = server.write("p/tls.tar", _shard("tls"))
    port = url.split(":")[2].split("/")[0]
    job = {"shards": [url]}
    for variable in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        out = _run(job, {"HTTPS_PROXY": proxy.url, variable: bundle}, tmp_path)
        assert out.get("keys") == ["tls-0", "tls-1", "tls-2"], out
    assert proxy.log() and all(line == f"CONNECT 127.0.0.1:{port} none" for line in proxy.log())
    # Without the CA, the test server's certificate is refused, clearly.
    refused = _run(job, {"HTTPS_PROXY": proxy.url}, tmp_path)
    assert "CERTIFICATE_VERIFY_FAILED" in refused["error"] or "certificate" in refused["error"].lower()
    assert url in refused["error"]
    # NO_PROXY sends it directly: nothing more in the proxy's log.
    before = len(proxy.log())
    out = _run(
        job,
        {"HTTPS_PROXY": proxy.url, "NO_PROXY": "localhost,127.0.0.1", "REQUESTS_CA_BUNDLE": bundle},
        tmp_path,
    )
    assert out.get("keys") == ["tls-0", "tls-1", "tls-2"] and len(proxy.log()) == before


def test_plain_http_in_absolute_form_and_no_proxy(
    http_server: HTTPFileServer, proxy: Proxy, tmp_path: Path
) -> None:
    url = http_server.write("p/plain.tar", _shard("plain"))
    out = _run({"shards": [url]}, {"HTTP_PROXY": proxy.url}, tmp_path)
    assert out.get("keys") == ["plain-0", "plain-1", "plain-2"], out
    assert f"GET {url} none" in proxy.log()
    before = len(proxy.log())
    out = _run({"shards": [url]}, {"HTTP_PROXY": proxy.url, "NO_PROXY": "127.0.0.0/8"}, tmp_path)
    assert out.get("keys") == ["plain-0", "plain-1", "plain-2"] and len(proxy.log()) == before


@pytest.mark.s3
def test_s3_reads_objects_and_writes_go_through_the_proxy(s3_server: SeaweedS3, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket("proxied")
    shard = s3_server.put_object(bucket, "shards/a.tar", _shard("s3"))
    client = s3_server.client()
    for i in range(5):
        client.put_object(Bucket=bucket, Key=f"objs/{i:03d}.txt", Body=b"x" * 10)
    proxy = Proxy(tmp_path, credentials="user:s3cr3t")
    try:
        job = {
            "shards": [shard],
            "objects": f"s3://{bucket}/objs/",
            "write": f"s3://{bucket}/out/w.txt",
            "storage_options": s3_server.storage_options,
        }
        out = _run(job, {"HTTP_PROXY": proxy.url}, tmp_path)
        assert out.get("keys") == ["s3-0", "s3-1", "s3-2"], out
        assert out["objects"] == ["000", "000", "001", "002", "003", "004"]
        assert out["written"] is True
        log = proxy.log()
        endpoint = s3_server.endpoint_url
        assert all(line.endswith(" ok") for line in log), log
        assert f"GET {endpoint}/{bucket}/shards/a.tar ok" in log  # the streaming path
        assert log.count(f"GET {endpoint}/{bucket}/objs/002.txt ok") == 1  # the epoll loop
        assert any(line.startswith(f"PUT {endpoint}/{bucket}/out/w.txt") for line in log)  # botocore
        assert any("list-type=2" in line for line in log)  # botocore's listing
        # Wrong credentials: a clear error, and the password is never shown.
        bad = _run(job, {"HTTP_PROXY": proxy.url.replace("s3cr3t", "wrong")}, tmp_path)
        assert "407" in bad["error"] and "wrong" not in bad["error"] and "s3cr3t" not in bad["error"]
    finally:
        proxy.stop()


def test_no_proxy_rules() -> None:
    p = Proxies(
        http="http://proxy:3128",
        https="http://proxy:3128",
        no_proxy="internal.example, .corp,10.0.0.0/8,host:8080",
    )
    assert p.route("https", "s3.amazonaws.com", 443) is not None
    assert (
        p.route("https", "internal.example", 443) is None
        and p.route("http", "a.internal.example", 80) is None
    )
    assert p.route("https", "x.corp", 443) is None and p.route("https", "corp.example", 443) is not None
    assert p.route("http", "10.1.2.3", 80) is None and p.route("http", "11.1.2.3", 80) is not None
    assert p.route("http", "host", 8080) is None and p.route("http", "host", 80) is not None
    assert Proxies(https="http://p:1", no_proxy="*").route("https", "anything", 443) is None
    assert Proxies().route("https", "anything", 443) is None
    assert "s3cr3t" not in repr(Proxies(https="http://u:s3cr3t@p:1"))
