"""The cached-key SigV4 signer against AWS's published example and botocore's own signer."""

from __future__ import annotations

import calendar
import time

import pytest
from _components import require_module

from shardstream.sources._sigv4 import EMPTY_SHA256, Credentials, SigV4Signer, uri_encode

_EXAMPLE = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
_MAY_24_2013 = float(calendar.timegm(time.strptime("20130524T000000Z", "%Y%m%dT%H%M%SZ")))


def test_aws_get_object_example() -> None:
    """AWS's "GET Object" example (S3 API reference, Signature Version 4: header authentication)."""
    signer = SigV4Signer(lambda: _EXAMPLE, "us-east-1", clock=lambda: _MAY_24_2013)
    headers = signer.sign(
        "GET", "examplebucket.s3.amazonaws.com", "/test.txt", headers={"Range": "bytes=0-9"}
    )
    assert headers["x-amz-date"] == "20130524T000000Z"
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_signing_key_is_cached_per_day_and_secret() -> None:
    now = [_MAY_24_2013]
    creds = [_EXAMPLE]
    signer = SigV4Signer(lambda: creds[0], "us-east-1", clock=lambda: now[0])
    signer.sign("GET", "h", "/a")
    first = signer.signing_key(_EXAMPLE.secret_key, "20130524")
    assert signer.signing_key(_EXAMPLE.secret_key, "20130524") is first
    now[0] += 86_400
    assert "20130525" in signer.sign("GET", "h", "/a")["Authorization"]
    creds[0] = Credentials("AK2", "other-secret", "session-token")
    signed = signer.sign("GET", "h", "/a")
    assert signed["x-amz-security-token"] == "session-token"
    assert "x-amz-security-token" in signed["Authorization"]
    assert signer.signing_key("other-secret", "20130525") is not first


@pytest.mark.parametrize("key", ["plain.txt", "dir/with space/ü.jpg", "a+b=c&d~e!(x).cls"])
def test_matches_botocore(key: str) -> None:
    """Same canonical request and signature as botocore's S3SigV4Auth for awkward keys."""
    require_module("botocore", "SigV4 signing compared with botocore's")
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    path = "/bucket/" + uri_encode(key)
    url = "http://127.0.0.1:8333" + path
    request = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": EMPTY_SHA256})
    auth = S3SigV4Auth(BotoCredentials(_EXAMPLE.access_key, _EXAMPLE.secret_key, "tok"), "s3", "eu-west-1")
    auth.add_auth(request)
    when = float(calendar.timegm(time.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ")))
    creds = Credentials(_EXAMPLE.access_key, _EXAMPLE.secret_key, "tok")
    signer = SigV4Signer(lambda: creds, "eu-west-1", clock=lambda: when)
    ours = signer.sign("GET", "127.0.0.1:8333", path)
    assert ours["Authorization"] == request.headers["Authorization"]
    # the fast form for a request without extra signed headers: the same headers, as lines
    lines = "".join(f"{name}: {value}\r\n" for name, value in ours.items())
    assert signer.header_lines("GET", "127.0.0.1:8333", path) == lines
    plain = SigV4Signer(lambda: _EXAMPLE, "eu-west-1", clock=lambda: when)
    lines = "".join(f"{name}: {value}\r\n" for name, value in plain.sign("GET", "h", path).items())
    assert plain.header_lines("GET", "h", path) == lines and "token" not in lines
