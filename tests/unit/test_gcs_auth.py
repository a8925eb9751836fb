"""``token=`` of ``gs://`` taken as gcsfs takes it, and never shown: what each form is, the kind
messages name, and the errors of unusable ones (no request is sent here; the forms that reach a
server are tested against fake-gcs-server in tests/integration/test_sources_gcs.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shardstream.errors import ConfigurationError
from shardstream.sources._gcs_auth import plan_token
from shardstream.sources.gcs import GCSSource

SECRET = "SECRET-kJ8x2QpL0vN4"


@pytest.fixture
def sources() -> Iterator[list[GCSSource]]:
    made: list[GCSSource] = []
    yield made
    for source in made:
        source.close()


def _source(made: list[GCSSource], token: object) -> GCSSource:
    made.append(GCSSource(endpoint_url="http://127.0.0.1:9", token=token))
    return made[-1]


def _pem() -> str:
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _account(**extra: Any) -> dict[str, Any]:
    return {
        "type": "service_account",
        "private_key_id": SECRET + "-id",
        "private_key": _pem(),
        "client_email": "reader@test.iam.gserviceaccount.com",
        "token_uri": "http://127.0.0.1:9/token",
        **extra,
    }


def test_keywords_and_defaults(sources: list[GCSSource]) -> None:
    assert plan_token(None).form == "default"
    assert plan_token(None, emulator=True).kind == "anonymous"
    assert plan_token("anon").form == "anonymous"
    assert plan_token("google_default").kind == "application default credentials"
    assert plan_token("cloud").form == "metadata"
    cloud = _source(sources, "cloud")
    cloud.auth.resolve()  # (the metadata server is asked at the first request, not here)
    assert cloud.auth.renewable and cloud.auth.kind == "metadata server credentials"
    for interactive in ("browser", "cache"):
        with pytest.raises(ConfigurationError, match="google_default"):
            plan_token(interactive)


def test_a_path_is_a_path_only_when_the_file_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "key.json"
    key.write_text("{}")
    plan = plan_token(str(key))
    assert (plan.form, plan.kind, plan.value) == ("file", "credentials file 'key.json'", str(key))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert plan_token("~/key.json").value == str(key)
    with pytest.raises(ConfigurationError, match="directory") as error:
        plan_token(str(tmp_path))
    assert str(tmp_path.parent) not in str(error.value)
    # A string naming no file is an access token, as in gcsfs; one that looks like a path says so,
    # quoting at most a file name (the directories may be half of a token).
    for token, note in (
        (f"/nonexistent/{SECRET}/key.json", "no file 'key.json' exists"),
        (f"{SECRET}/rest", "contains a path separator"),
        ("~/" + SECRET, "contains a path separator"),
    ):
        plan = plan_token(token)
        assert (plan.form, plan.kind, plan.value) == ("access_token", "access token", token)
        assert note in plan.note and SECRET not in plan.note and SECRET not in repr(plan)
    assert plan_token(f"ya29.{SECRET}").note == ""


def test_json_text_and_dicts_are_key_contents() -> None:
    info = {"type": "service_account", "private_key": SECRET}
    for token, kind in (
        (json.dumps(info), "JSON key text"),
        ("  \n" + json.dumps(info), "JSON key text"),
        (info, "credentials dict"),
    ):
        plan = plan_token(token)
        assert (plan.form, plan.kind, plan.value) == ("info", kind, info)
        assert SECRET not in repr(plan)
    with pytest.raises(ConfigurationError, match=r"not valid JSON \(line 1, column \d+") as error:
        plan_token(json.dumps(info)[:-5])
    assert SECRET[:10] not in str(error.value)


def test_other_values(sources: list[GCSSource]) -> None:
    credentials = pytest.importorskip("google.oauth2.credentials")
    token = credentials.Credentials(token=SECRET)
    plan = plan_token(token)
    assert (plan.form, plan.kind) == ("credentials", "Credentials object of type Credentials")
    source = _source(sources, token)
    source.auth.resolve()
    assert source.auth.headers() == {"Authorization": f"Bearer {SECRET}"}
    assert SECRET not in repr(source)
    with pytest.raises(ConfigurationError, match="of type int is not understood"):
        plan_token(17)


def test_every_form_is_named_by_its_kind_only(sources: list[GCSSource], tmp_path: Path) -> None:
    account = _account()
    key = tmp_path / "key.json"
    key.write_text(json.dumps(account))
    expected = {
        "service account reader@test.iam.gserviceaccount.com": [json.dumps(account), account, str(key)],
        "access token": [SECRET],
    }
    for kind, tokens in expected.items():
        for token in tokens:
            source = _source(sources, token)
            source.auth.resolve()
            assert source.auth.kind == kind
            shown = repr(source) + repr(source.auth)
            assert SECRET not in shown and "PRIVATE KEY" not in shown and str(tmp_path) not in shown
    untyped = {k: v for k, v in account.items() if k != "type"}  # gcsfs's older dicts have no type
    source = _source(sources, untyped)
    source.auth.resolve()
    assert source.auth.renewable and source.auth.kind.startswith("service account")


@pytest.mark.parametrize(
    "info",
    [
        {
            "type": "service_account",
            "private_key": f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n",
            "client_email": "a@b.c",
            "token_uri": "https://t",
        },
        {"type": "service_account", "private_key": SECRET},  # fields missing
        {"type": "authorized_user", "client_secret": SECRET, "refresh_token": SECRET + "2"},  # no client_id
        {"type": "external_account", "credential_source": SECRET},
        {"type": SECRET, "private_key": SECRET},
        {"client_secret": SECRET},  # no type, and neither a service account's nor a user's fields
    ],
)
def test_unusable_keys_are_refused_without_their_secrets(
    sources: list[GCSSource], tmp_path: Path, info: dict[str, Any]
) -> None:
    key = tmp_path / "key.json"
    key.write_text(json.dumps(info))
    for token, where in (
        (info, "credentials dict"),
        (json.dumps(info), "JSON key text"),
        (str(key), "credentials file 'key.json'"),
    ):
        source = _source(sources, token)
        with pytest.raises(ConfigurationError, match=f"cannot load the gs:// {where}") as error:
            source.auth.resolve()
        assert SECRET not in str(error.value) and error.value.__cause__ is None
        assert error.value.__suppress_context__


def test_unreadable_key_files(sources: list[GCSSource], tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    key.write_text(f"not json {SECRET}")
    with pytest.raises(ConfigurationError, match="'key.json' is not JSON") as error:
        _source(sources, str(key)).auth.resolve()
    assert SECRET not in str(error.value)
    if os.geteuid() != 0:  # (root reads it anyway)
        key.chmod(0)
        with pytest.raises(ConfigurationError, match="cannot read the gs:// credentials file 'key.json'"):
            _source(sources, str(key)).auth.resolve()
