"""Cache names: readable, collision-free across schemes/hosts/buckets, never escaping the cache."""

from __future__ import annotations

import pytest
from _components import require_module

from shardstream.cache.naming import cache_name, check_name, pipe_cleaner, url_to_cache_name
from shardstream.errors import ConfigurationError


def test_names_keep_scheme_host_and_path() -> None:
    assert cache_name("s3://b1/train-000.tar") == "s3/b1/train-000.tar"
    assert cache_name("http://h:8080/b2/train-000.tar") == "http/h_8080/b2/train-000.tar"
    assert cache_name("https://h/a/b/c.tar.gz") == "https/h/a/b/c.tar.gz"


def test_colliding_basenames_get_distinct_names() -> None:
    urls = [
        "s3://b1/train-000.tar", "s3://b2/train-000.tar", "http://h/b1/train-000.tar",
        "https://h/b1/train-000.tar", "http://h:81/b1/train-000.tar", "gs://b1/train-000.tar",
        "s3://b1/x/train-000.tar", "az://b1/train-000.tar", "hf://datasets/o/b1/train-000.tar",
        "hf://datasets/o/b1@v2/train-000.tar", "abfs://c1@acct.dfs.core.windows.net/train-000.tar",
        "abfs://c2@acct.dfs.core.windows.net/train-000.tar",
    ]  # fmt: skip
    names = [cache_name(u) for u in urls]
    assert len(set(names)) == len(urls)
    # WebDataset's naming collapses all of them to one file.
    assert {url_to_cache_name(u) for u in urls[:7]} == {"train-000.tar"}


@pytest.mark.parametrize(
    "url", ["http://h/../../etc/passwd", "http://h/a/./../b", "s3://b/.shardstream/lock", "http://h/.hidden"]
)
def test_names_never_escape_or_hide(url: str) -> None:
    name = cache_name(url)
    parts = name.split("/")
    assert all(p not in ("", ".", "..") and not p.startswith(".") for p in parts), name


def test_query_becomes_hash_suffix_without_secrets() -> None:
    a = cache_name("https://h/x.tar?X-Amz-Signature=secret123&v=1")
    b = cache_name("https://h/x.tar?v=2")
    assert a != b and a.startswith("https/h/x.tar@") and "secret" not in a


def test_credentials_never_in_name() -> None:
    assert "pw" not in cache_name("http://user:pw@h/x.tar")


def test_long_components_are_shortened_but_distinct() -> None:
    a, b = cache_name("s3://b/" + "a" * 300 + "1.tar"), cache_name("s3://b/" + "a" * 300 + "2.tar")
    assert a != b and max(len(p) for p in a.split("/")) <= 200


def test_pipe_specs_named_after_inner_url() -> None:
    assert pipe_cleaner("pipe:curl -s -L http://h/b/x.tar") == "http://h/b/x.tar"
    assert cache_name("pipe:curl -s http://h/b/x.tar") == "http/h/b/x.tar"
    assert cache_name("pipe:cat /x").startswith("pipe/")


def test_check_name_rejects_escapes_with_fix() -> None:
    assert check_name("bucket/x.tar") == "bucket/x.tar"
    assert check_name("s3://b/x.tar") == "s3/b/x.tar"  # url_to_name may return a URL
    for bad in ("../x", "/abs/x", "a/../../x", "", ".shardstream/x"):
        with pytest.raises(ConfigurationError, match="url_to_name returned"):
            check_name(bad, "s3://b/x")


def test_url_to_cache_name_is_webdatasets() -> None:
    wds_cache = require_module(
        "webdataset.cache", "the comparison with WebDataset 1.0.2's cache naming", package="webdataset"
    )
    for url in ("s3://b/a/x.tar", "http://h/a/b/c.tar", "gs://b/x.tar", "weird:thing/x"):
        for ndir in (0, 1):
            assert url_to_cache_name(url, ndir) == wds_cache.url_to_cache_name(url, ndir)


def test_object_store_keys_keep_query_and_fragment_characters() -> None:
    # For s3:// (and any scheme but http(s)) '?' and '#' are part of the key, so they name files.
    assert cache_name("s3://b/odd/q?x=1.tar") == "s3/b/odd/q%3Fx=1.tar"
    assert cache_name("s3://b/a#b%20c.tar") == "s3/b/a%23b%2520c.tar"
    assert len({cache_name("s3://b/q.tar"), cache_name("s3://b/q?.tar"), cache_name("s3://b/q#.tar")}) == 3
    assert cache_name("https://h/x.tar?v=1").startswith("https/h/x.tar@")
