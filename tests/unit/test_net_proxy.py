"""Choosing a proxy (net.proxy): NO_PROXY first, proxy URLs parsed only for the origins that use
them, the variable each came from in every message, and no credentials in any message or repr.
(Connections through real proxies: tests/integration/test_proxy_kinds.py.)"""

from __future__ import annotations

import sys

import pytest

from shardstream.config import network_env
from shardstream.net import multiplex
from shardstream.net.proxy import Proxies, ProxyError, ProxyRoute, parse
from shardstream.net.whole import WholeBodyPool, render_request


def test_no_proxy_is_decided_before_the_proxy_url_is_read() -> None:
    proxies = Proxies(
        http="ftp://user:pw0rd@ftp.example:21",
        https="https://",
        no_proxy="internal.example,127.0.0.1",
        http_variable="all_proxy",
        https_variable="HTTPS_PROXY",
    )
    # Built without complaint, and the origins that NO_PROXY lists connect directly.
    assert proxies.route("http", "a.internal.example", 80) is None
    assert proxies.route("https", "127.0.0.1", 443) is None
    assert proxies.route("ftp", "elsewhere", 21) is None  # no proxy for the scheme
    with pytest.raises(ProxyError) as unsupported:
        proxies.route("http", "elsewhere", 80)
    message = str(unsupported.value)
    assert "all_proxy" in message and "ftp://ftp.example:21" in message and "socks5h://" in message
    assert "elsewhere" in message and "pw0rd" not in message and "user" not in message
    assert not unsupported.value.transient
    with pytest.raises(ProxyError, match="HTTPS_PROXY .*names no host"):
        proxies.route("https", "elsewhere", 443)
    with pytest.raises(ProxyError, match="HTTPS_PROXY .*port"):
        Proxies(https="http://proxy:99999").route("https", "elsewhere", 443)
    assert "pw0rd" not in repr(proxies) and "all_proxy" in repr(proxies)


def test_socks_without_pysocks_is_refused_only_for_its_origins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "socks", None)  # as if PySocks were not installed
    proxies = Proxies(
        http="http://127.0.0.1:3128",
        https="socks5h://user:pw0rd@127.0.0.1:1080",
        no_proxy="direct.example",
        https_variable="ALL_PROXY",
    )
    assert proxies.route("https", "direct.example", 443) is None
    assert proxies.route("http", "web.example", 80) == ProxyRoute("http", "127.0.0.1", 3128, "HTTP_PROXY")
    with pytest.raises(ProxyError) as missing:
        proxies.route("https", "web.example", 443)
    message = str(missing.value)
    assert "ALL_PROXY" in message and "socks5h://127.0.0.1:1080" in message
    assert "pip install 'shardstream[socks]'" in message and "pw0rd" not in message


@pytest.mark.parametrize(
    ("url", "kind", "port", "absolute"),
    [
        ("proxy.example:3128", "http", 3128, True),  # curl's default scheme
        ("http://proxy.example", "http", 80, True),
        ("https://proxy.example", "https", 443, True),
        ("socks4://proxy.example", "socks4", 1080, False),
        ("socks4a://proxy.example:1081", "socks4a", 1081, False),
        ("socks5://proxy.example", "socks5", 1080, False),
        ("SOCKS5H://proxy.example:9050", "socks5h", 9050, False),
    ],
)
def test_proxy_kinds(url: str, kind: str, port: int, absolute: bool) -> None:
    pytest.importorskip("socks")
    route = parse(url, "HTTPS_PROXY")
    assert (route.kind, route.host, route.port, route.absolute) == (kind, "proxy.example", port, absolute)
    assert route.tls == (kind == "https") and route.socks == kind.startswith("socks")
    assert route.shown == f"{kind}://proxy.example:{port}"


def test_credentials_are_used_and_never_shown() -> None:
    pytest.importorskip("socks")
    http = parse("https://us%40er:p%3Ass@proxy.example:8443", "HTTPS_PROXY")
    assert http.authorization == "Basic dXNAZXI6cDpzcw=="  # base64 of us@er:p:ss
    socks = parse("socks5://user:pass@proxy.example", "ALL_PROXY")
    assert socks.authorization is None and (socks.username, socks.password) == ("user", "pass")
    for route in (http, socks):
        assert "p:ss" not in repr(route) and "pass" not in repr(route) and route.variable in repr(route)


def test_network_env_keeps_where_each_proxy_came_from() -> None:
    env = network_env({"ALL_PROXY": "socks5h://127.0.0.1:1080", "https_proxy": "https://p:443"})
    assert (env.http_proxy, env.http_proxy_variable) == ("socks5h://127.0.0.1:1080", "ALL_PROXY")
    assert (env.https_proxy, env.https_proxy_variable) == ("https://p:443", "https_proxy")
    env = network_env({"all_proxy": "socks5://a:1", "ALL_PROXY": "socks5://b:1", "HTTP_PROXY": "http://c:1"})
    assert (env.http_proxy, env.http_proxy_variable) == ("http://c:1", "HTTP_PROXY")
    assert (env.https_proxy, env.https_proxy_variable) == ("socks5://a:1", "all_proxy")
    assert network_env({}).https_proxy is None


@pytest.mark.skipif(not multiplex.AVAILABLE, reason="the epoll loop is Linux only")
def test_an_unusable_proxy_is_the_answer_of_the_epoll_loops_request() -> None:
    pool = WholeBodyPool(proxies=Proxies(http="gopher://proxy.example:70"))
    loop = multiplex.Multiplexer(pool)
    try:
        request = render_request("GET", "/a", {"Host": "web.example"})
        answer = loop.submit("a", ("http", "web.example", 80), request)
        assert answer is not None and isinstance(answer.error, ProxyError), answer
        assert "HTTP_PROXY" in str(answer.error) and len(loop) == 0
    finally:
        loop.close()
        pool.close()
