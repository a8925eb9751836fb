"""redact_url: every kind of signed-URL secret and user:password, in any case, in errors and logs."""

from __future__ import annotations

import json
import logging
import pickle
import random
import traceback

import pytest

import shardstream.errors as ss_errors
from shardstream.errors import ShardFormatError, SourceError, TransientSourceError, redact_url
from shardstream.handlers import warn_and_continue
from shardstream.sources._resume import Opened, ResumableReader
from shardstream.sources._retry import RetryPolicy
from shardstream.telemetry import StageStats

# (parameter as the provider writes it, a value) for every secret-bearing parameter we know.
SECRETS = [
    # AWS SigV4 presigned URLs (S3) and SigV2
    ("X-Amz-Signature", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"),
    ("X-Amz-Credential", "AKIAIOSFODNN7EXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request"),
    ("X-Amz-Security-Token", "IQoJb3JpZ2luX2VjEJr%2F%2F%2F%2F"),
    ("AWSAccessKeyId", "AKIAIOSFODNN7EXAMPLE"),
    ("Signature", "dGhpcyBpcyBhIHNpZ25hdHVyZQ%3D%3D"),
    # Google Cloud Storage V4 and V2 signed URLs
    ("X-Goog-Signature", "5a4b3c2d1e0f"),
    ("X-Goog-Credential", "svc%40project.iam.gserviceaccount.com%2F20240101%2Fauto%2Fstorage"),
    ("GoogleAccessId", "svc@project.iam.gserviceaccount.com"),
    # CloudFront (the Hugging Face Hub's CDN)
    ("Key-Pair-Id", "K2JCJMDEHXQW5F"),
    # Azure SAS: the signature, and the ids of a user delegation key's principal and tenant
    ("sig", "Zm9vYmFyYmF6%2B%2F%3D"),
    ("skoid", "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab"),
    ("sktid", "9f8e7d6c-dddd-eeee-ffff-ba9876543210"),
    # generic tokens, keys and passwords
    ("token", "ghp_abcdef"),
    ("access_token", "ya29.a0Af"),
    ("api_key", "k-123"),
    ("apikey", "k-456"),
    ("key", "AIzaSyA"),
    ("password", "hunter2"),
    ("client_secret", "cs-789"),
]


@pytest.mark.parametrize(("name", "value"), SECRETS)
@pytest.mark.parametrize("case", [str, str.lower, str.upper])
def test_each_secret_parameter_is_redacted_in_any_case(name: str, value: str, case: object) -> None:
    param = case(name)  # type: ignore[operator]
    for url in (
        f"https://host/b/k.tar?{param}={value}",
        f"https://host/b/k.tar?a=1&{param}={value}&b=2",
        f"s3://bucket/k.tar?{param}={value}#frag",
    ):
        out = redact_url(url)
        assert value not in out and f"{param}=***" in out, out
        assert out.startswith(url.split("?")[0])
    assert "a=1" in redact_url(f"https://host/k?a=1&{param}={value}&b=2")  # others are kept


@pytest.mark.parametrize(
    "query",
    [
        "sv=2022-11-02&ss=b&srt=o&sp=r&se=2030-01-01T00%3A00%3A00Z&st=2024-01-01&spr=https&sig=SECRET",
        "skoid=oid&sktid=tid&skt=2024&ske=2030&sks=b&skv=2022&sv=2022&sp=r&sig=SECRET",
    ],
)
def test_azure_sas_keeps_non_secret_fields(query: str) -> None:
    out = redact_url(f"https://acct.blob.core.windows.net/c/shard.tar?{query}")
    assert "SECRET" not in out and "sig=***" in out
    assert "sp=r" in out and "sv=2022" in out  # validity and permissions help debugging, grant nothing
    assert (
        "=oid" not in out and "=tid" not in out
    )  # who holds the delegation key: gone, like X-Amz-Credential


def test_connection_string_secrets() -> None:
    text = (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=KEY+/==;EndpointSuffix=core.windows.net;"
        "SharedAccessSignature=sv=2022-11-02&sp=r&sig=SIG%2B"
    )
    out = redact_url(text)
    assert "KEY+/" not in out and "SIG" not in out and "sv=2022" not in out
    assert "AccountName=acct" in out and "EndpointSuffix=core.windows.net" in out


@pytest.mark.parametrize(
    "text",
    [
        # a signed URL passed in another URL's query, percent-encoded once or twice
        "https://proxy/get?next=https%3A%2F%2Fu%3ASECRET1%40h%2Fk.tar%3Fsig%3DSECRET2%26sp%3Dr",
        "https://proxy/get?next=https%253A%252F%252Fu%253ASECRET1%2540h%252Fk%253FX-Amz-Signature%253DSECRET2%2526sp%253Dr",
        # an object key that holds a query string, as a cache path writes it
        "s3/bucket/k.tar%3FX-Amz-Signature=SECRET2%26sp=r and https%3A%2F%2FSECRET1%40host%2F",
    ],
)
def test_percent_encoded_urls(text: str) -> None:
    out = redact_url(text)
    assert "SECRET" not in out, out
    assert "sp%" in out or "sp=r" in out  # what is not secret stays


def test_secret_fields_of_dict_reprs_and_json() -> None:
    """storage_options and key files shown as a dict's repr or as JSON lose their secret values."""
    options = {
        "endpoint_url": "http://127.0.0.1:8333",
        "secret_access_key": "SECRET1",
        "Session_Token": "it's SECRET2",  # (repr quotes it with ")
        "headers": {"Authorization": "Bearer SECRET3"},
        "token": {"type": "service_account", "private_key": "-----BEGIN\nSECRET4\n"},
    }
    for text in (repr(options), json.dumps(options), f"FunctionStage(storage_options={options!r})"):
        out = redact_url(text)
        assert "SECRET" not in out, out
        assert "http://127.0.0.1:8333" in out and "service_account" in out
    kept = "{'key': 'k000', 'signature': 'ab12', 'token_count': '3'}"  # sample keys, hashes: not secrets
    assert redact_url(kept) == kept


def test_a_limit_cuts_after_redacting() -> None:
    url = "https://user:" + "p" * 300 + "@host/k.tar?sig=" + "s" * 300
    assert redact_url(url, limit=40) == redact_url(url)[:40] == "https://***@host/k.tar?sig=***"[:40]
    assert "p" * 10 not in redact_url({"state": url}, limit=60)


def test_every_library_error_redacts_its_own_message() -> None:
    """ShardStreamError redacts its text arguments for every subclass: a message that formats a
    URL unredacted still loses its secrets, in str, repr, args, tracebacks and pickles."""
    url = "https://u:PASSWORD@h/k.tar?X-Amz-Signature=SIGNATURE"
    errors: list[BaseException] = [
        ss_errors.SourceError(f"cannot open {url}", url=url),
        ss_errors.ShardNotFoundError(f"no {url}"),
        ss_errors.AccessDeniedError(f"denied {url}", url=url, status=403),
        ss_errors.StateError(f"bad state {{'url': '{url}'}}"),
        ss_errors.ConfigurationError(url),
        ss_errors.MissingFieldError(f"no field in {url}"),
        ss_errors.CacheLockTimeout(f"waited for {url}"),
        ss_errors.WorkerStuckError(f"stuck on {url}", worker=0, pid=1, stack=""),
        ss_errors.DecodingError(f"cannot decode {url}", url=url),
    ]
    for error in errors:
        try:
            raise RuntimeError("outer") from error
        except RuntimeError as outer:
            text = "".join(traceback.format_exception(outer))
        shown = [text, str(error), repr(error), repr(error.args)]
        if not isinstance(error, ss_errors.WorkerStuckError):  # (raised where it is found, never pickled)
            shown.append(repr(pickle.loads(pickle.dumps(error))))
        for one in shown:
            assert "PASSWORD" not in one and "SIGNATURE" not in one, (type(error), one)
        assert "***" in str(error)


def test_error_policies_and_skip_counters_redact_any_error(caplog: pytest.LogCaptureFixture) -> None:
    """A user's map function (or a library) may raise a builtin error naming a URL."""
    error = ValueError("failed on https://u:PASSWORD@h/x?token=TOKEN")
    with caplog.at_level(logging.WARNING, logger="shardstream"), pytest.warns(UserWarning) as caught:
        assert warn_and_continue(error)
    stats = StageStats()
    stats.record(error)
    for text in (caplog.text, str(caught[0].message), str(stats.last_error), repr(stats)):
        assert "PASSWORD" not in text and "TOKEN" not in text and "***" in text


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:s3cret@host/x.tar",
        "https://alice:p%40ss@host:8443/x.tar",
        "https://alice:pa@ss@host/x.tar",  # an unescaped "@" in the password
        "ftp://token-only-SECRET@host/x.tar",
    ],
)
def test_userinfo_is_redacted(url: str) -> None:
    out = redact_url(url)
    assert "s3cret" not in out and "p%40ss" not in out and "pa@ss" not in out and "SECRET" not in out
    assert "***@host" in out and out.endswith("/x.tar")


def test_azure_container_in_the_authority_is_kept() -> None:
    url = "abfs://container@acct.dfs.core.windows.net/train/x.tar"
    assert redact_url(url) == url
    assert redact_url(f"failed: {url.replace('abfs', 'ABFSS')}") == f"failed: {url.replace('abfs', 'ABFSS')}"
    assert (
        redact_url("abfss://user:pw@acct.dfs.core.windows.net/x") == "abfss://***@acct.dfs.core.windows.net/x"
    )
    assert redact_url("https://user@host/x") == "https://***@host/x"


def test_several_urls_in_one_message_and_parameter_lookalikes() -> None:
    text = (
        "cannot open 'https://h/a?X-Amz-Signature=AAA' (redirected to https://u:pw@cdn/b?sig=BBB&sp=r) "
        "and https://h/c?keyframe=1&monkey=2&signatures=3"
    )
    out = redact_url(text)
    assert "AAA" not in out and "BBB" not in out and ":pw@" not in out
    assert "keyframe=1" in out and "monkey=2" in out and "signatures=3" in out  # not secret names
    assert out.count("***") == 3


def test_errors_redact_their_urls() -> None:
    url = "https://h/x.tar?X-Goog-Signature=SECRET&x=1"
    for error in (
        SourceError(f"cannot open {redact_url(url)}", url=url),
        ShardFormatError("bad header", url=url, member="a.txt", offset=0),
    ):
        assert "SECRET" not in str(error) and "SECRET" not in str(error.url)


class _FlakyOnce:
    """An opener whose first request fails with a transient error naming the raw URL."""

    def __init__(self, url: str) -> None:
        self.url, self.calls = url, 0

    def __call__(self, offset: int, etag: str | None) -> Opened:
        self.calls += 1
        if self.calls == 1:
            raise TransientSourceError(f"reset talking to {redact_url(self.url)}", url=self.url)
        return Opened(_Body(b"data"[offset:]), 4, None)


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def readinto(self, buffer: memoryview) -> int:
        n = len(self.data[: len(buffer)])
        buffer[:n], self.data = self.data[:n], self.data[n:]
        return n

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("name", "value"), SECRETS)
def test_open_and_retry_log_lines_are_redacted(
    name: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"https://User:PassWord1@host/k.tar?{name.upper()}={value}&b=2"
    policy = RetryPolicy(attempts=3, sleep=lambda s: None, rng=random.Random(0))
    with caplog.at_level(logging.DEBUG, logger="shardstream"):
        reader = ResumableReader(url, _FlakyOnce(url), translate=lambda e: SourceError(str(e)), policy=policy)
        assert reader.read() == b"data"
    assert "retry 1/2" in caplog.text and "open https://***@host/k.tar" in caplog.text
    assert value not in caplog.text and "PassWord1" not in caplog.text
    assert value not in reader.url


def test_credential_keywords_stay_readable_and_token_values_do_not() -> None:
    """gcsfs's ``token=`` keywords name a kind of credentials, so a hint may show them; any
    other quoted value of a secret-named field is a secret."""
    hint = "pass storage_options={'token': 'anon'} or {\"token\": \"google_default\"}"
    assert redact_url(hint) == hint
    text = "storage_options={'token': 'ya29.a0AfH6SMBx', \"secret\": \"anon-but-longer\"}"
    assert redact_url(text) == "storage_options={'token': '***', \"secret\": \"***\"}"
