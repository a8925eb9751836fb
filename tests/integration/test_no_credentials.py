"""Reading a cloud store with no credentials at all: one short error that names the storage_options
keys (and the environment variables) to pass, not a chained traceback of the SDK's attempts.

Each case runs in a fresh interpreter with a clean environment (HOME an empty directory, so no
~/.aws, ~/.azure or gcloud configuration is found; no AWS_*, AZURE_* or GOOGLE_* variables)
against the store's emulator, and counts the lines of the formatted traceback the user would see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shardstream.testing.azurite import Azurite
from shardstream.testing.fakegcs import FakeGCS
from shardstream.testing.seaweed import SeaweedS3

pytestmark = pytest.mark.s3

#: Iterate a dataset; print the error's type, message and the line count of its traceback.
_ITERATE = """
import json, sys, traceback
import shardstream as ss
try:
    for _ in ss.ShardStream(sys.argv[1], storage_options=json.loads(sys.argv[2])):
        pass
except Exception as exc:
    text = "".join(traceback.format_exception(exc))
    print(json.dumps({"type": type(exc).__name__, "message": str(exc), "lines": len(text.splitlines())}))
"""
#: The error and its call stack through the pipeline (about 50 lines for s3://), without the SDK's
#: chain (botocore's two credential lookups made it 86 lines; azure-identity's list, 74).
MAX_LINES = 60


def _clean_env(home: Path) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "AZURE_", "GOOGLE_", "SHARDSTREAM_", "STORAGE_EMULATOR_HOST"))
    }
    env["HOME"] = str(home)
    # No cloud metadata servers here: skip their probes (seconds each), as on a laptop.
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["NO_GCE_CHECK"] = "True"
    return env


def _iterate(url: str, options: dict[str, Any], home: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _ITERATE, url, json.dumps(options)],
        env=_clean_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stdout + proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_s3_without_credentials(s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    url = s3_server.put_object(s3_bucket, "a.tar", bytes(1024))
    found = _iterate(url, {"endpoint_url": s3_server.endpoint_url}, tmp_path / "home")
    assert found["type"] == "AccessDeniedError"
    assert found["lines"] <= MAX_LINES, found
    message = found["message"]
    assert message.startswith(f"cannot open {url} at endpoint {s3_server.endpoint_url}: no AWS credentials")
    for name in ("key=", "secret=", "profile=", "anon=True", "endpoint_url=", "--storage-option key="):
        assert name in message, name
    assert "AWS_ACCESS_KEY_ID" in message and "AWS_PROFILE" in message


def test_s3_without_credentials_in_a_worker_is_one_cli_line(
    s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path
) -> None:
    """torch re-raises a worker's error with the worker's traceback in its message; the command
    line prints the worker's own message."""
    url = s3_server.put_object(s3_bucket, "a.tar", bytes(1024))
    proc = subprocess.run(
        [sys.executable, "-m", "shardstream.cli", "bench", url, "--workers", "1"]
        + ["--storage-option", f"endpoint_url={s3_server.endpoint_url}"],
        env=_clean_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"shardstream bench: error: cannot open {url} at endpoint ")
    assert "storage_options: key= and secret=" in lines[0]
    assert lines[0].endswith("(in DataLoader worker process 0; -vv logs its traceback)")


def test_gcs_without_credentials(gcs_server: FakeGCS, tmp_path: Path) -> None:
    bucket = gcs_server.create_bucket("no-credentials")
    url = gcs_server.put_object(bucket, "a.tar", bytes(1024))
    found = _iterate(url, {"endpoint_url": gcs_server.endpoint_url}, tmp_path / "home")
    assert found["type"] == "AccessDeniedError"
    assert found["lines"] <= MAX_LINES, found
    message = found["message"]
    assert "no Google Cloud credentials were found" in message
    for name in ("{'token': KEY}", "{'token': 'anon'}", "--storage-option token="):
        assert name in message, name
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message


def test_azure_without_credentials(azurite_server: Azurite, tmp_path: Path) -> None:
    container = azurite_server.create_container("no-credentials")
    azurite_server.put_blob(container, "a.tar", bytes(1024))
    url = f"az://{container}/a.tar"
    options = {"endpoint_url": azurite_server.endpoint_url, "account_name": azurite_server.account_name}
    found = _iterate(url, options, tmp_path / "home")
    assert found["type"] == "AccessDeniedError"
    assert found["lines"] <= MAX_LINES, found
    message = found["message"]
    assert message.startswith(f"{url}: no Entra ID token for Azure Storage from DefaultAzureCredential")
    for name in ("account_key=", "account_name=", "sas_token=", "connection_string=", "anon=True"):
        assert name in message, name
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        assert name in message, name


def test_azure_without_credentials_is_one_cli_line(azurite_server: Azurite, tmp_path: Path) -> None:
    """azure-identity logs each credential it tried (a dozen lines) before our error says it."""
    container = azurite_server.create_container("no-credentials-cli")
    url = azurite_server.put_blob(container, "a.tar", bytes(1024))
    proc = subprocess.run(
        [sys.executable, "-m", "shardstream.cli", "ls", url]
        + ["--storage-option", f"endpoint_url={azurite_server.endpoint_url}"]
        + ["--storage-option", f"account_name={azurite_server.account_name}"],
        env=_clean_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"shardstream ls: error: {url}: no Entra ID token"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
