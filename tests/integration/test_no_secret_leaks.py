"""No secret reaches an error, a log line, a ``repr`` or the CLI's output (issue 43).

Secrets are generated (seeded: each test's own ``random.Random``, so a failure repeats) and
planted everywhere a user puts them: the user info of URLs, every secret-bearing query parameter
(spelled in random case, its name sometimes percent-encoded), ``storage_options`` (S3 keys, a GCS
token in every form gcsfs takes, Azure account keys, SAS tokens and connection strings, the Hub
token, HTTP headers) and proxy URLs. Then every path that can report them runs against the real
stores (SeaweedFS, fake-gcs-server, Azurite, the Hub stand-in, loopback HTTP servers): auth
failures, 403 and 404, a timeout, state errors, ``log_shards``, telemetry, the CLI (a subprocess)
and the ``repr`` of the sources, datasets and loaders built with those options.

Everything is captured: the whole traceback chain of every exception (``__cause__`` and
``__context__`` included), its ``repr`` and attributes, every warning, every log record of the
``shardstream`` logger at DEBUG, and the subprocesses' stdout and stderr. A leak is any
10-character piece of a secret, raw, percent-encoded or JSON-escaped, so a truncated secret
counts too.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import io
import itertools
import json
import logging
import os
import random
import socket
import string
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import shardstream as ss
from shardstream.shards.runs import Run
from shardstream.sources import get_source, open_url, stat_url

SEED = 43
WINDOW = 10  # a leak is any piece of a secret this long
ALPHABET = string.ascii_letters + string.digits

#: Query parameters that carry a secret or name a key (see shardstream.errors._SECRET_PARAMETERS).
SECRET_PARAMETERS = [
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "Signature",
    "X-Goog-Signature",
    "X-Goog-Credential",
    "GoogleAccessId",
    "sig",
    "skoid",
    "sktid",
    "token",
    "access_token",
    "key",
    "api_key",
]

_count = itertools.count()


class Planted:
    """The secrets one test planted, and the check that none of them shows."""

    def __init__(self, name: str) -> None:
        self.rng = random.Random(f"{SEED}:{name}")
        self.secrets: dict[str, str] = {}  # secret -> where it was planted

    def make(self, where: str, n: int = 0) -> str:
        """A new secret of letters and digits, 20 to 40 of them (``n``: exactly that many)."""
        size = n or self.rng.randint(20, 40)
        return self.add("".join(self.rng.choice(ALPHABET) for _ in range(size)), where)

    def key(self, where: str, nbytes: int = 64) -> str:
        """A new base64 secret (an Azure account key's shape: ``+``, ``/`` and ``=`` in it)."""
        return self.add(base64.b64encode(self.rng.randbytes(nbytes)).decode(), where)

    def add(self, secret: str, where: str) -> str:
        self.secrets[secret] = where
        return secret

    def spell(self, name: str) -> str:
        """``name`` in random case, with one of its characters percent-encoded half the time."""
        out = "".join(c.upper() if self.rng.random() < 0.5 else c.lower() for c in name)
        if self.rng.random() < 0.5:
            i = self.rng.randrange(len(out))
            out = out[:i] + f"%{ord(out[i]):02X}" + out[i + 1 :]
        return out

    def query(self, where: str) -> str:
        """A query string with a fresh secret in every secret parameter, among harmless ones."""
        params = [f"{self.spell(name)}={self.make(f'{where} ?{name}')}" for name in SECRET_PARAMETERS]
        self.rng.shuffle(params)
        return "sv=2022-11-02&sp=r&" + "&".join(params) + "&se=2030-01-01"

    def url(self, base: str, path: str, where: str) -> str:
        """``base`` (``http://host:port``) with secret user info, ``path`` and :meth:`query`."""
        scheme, _, host = base.partition("://")
        user, password = self.make(f"{where} user"), self.make(f"{where} password")
        return f"{scheme}://{user}:{password}@{host}/{path}?{self.query(where)}"

    def leaks(self, text: str) -> list[str]:
        """Where each secret found in ``text`` was planted."""
        found = []
        for secret, where in self.secrets.items():
            for form in {secret, quote(secret, safe=""), json.dumps(secret)[1:-1]}:
                if any(form[i : i + WINDOW] in text for i in range(len(form) - WINDOW + 1)):
                    found.append(where)
                    break
        return found


class Capture:
    """Collects every text a run of actions produces: exceptions, warnings, reprs, log lines."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        self.parts: list[str] = []
        self.errors: list[BaseException] = []

    def run(self, what: str, action: Callable[[], object]) -> BaseException | None:
        """Run ``action``; its exception (returned) and warnings are captured."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - every error is what we look at
                self.errors.append(exc)
                self.parts.append(f"[{what}] " + "".join(traceback.format_exception(exc)))
                self.parts.append(f"{exc!r} {vars(exc)!r}")
                return exc
            finally:
                self.parts.extend(f"[{what}] warning: {w.message}" for w in caught)
        return None

    def show(self, *objects: object) -> None:
        """Capture the ``repr`` and ``str`` of ``objects``."""
        self.parts.extend(f"{o!r} {o}" for o in objects)

    def text(self) -> str:
        return "\n".join([*self.parts, self.caplog.text])

    def check(self, planted: Planted, *, errors: int) -> str:
        """Fail on any leak; at least ``errors`` actions must have failed (the paths ran)."""
        text = self.text()
        leaks = planted.leaks(text)
        assert not leaks, f"secrets leaked ({', '.join(leaks)}):\n{_around(text, planted)}"
        assert len(self.errors) >= errors, [f"{type(e).__name__}: {e}" for e in self.errors]
        return text


def _around(text: str, planted: Planted) -> str:
    """The lines that hold a leak, for the failure message."""
    lines = [line for line in text.splitlines() if planted.leaks(line)]
    return "\n".join(line[:400] for line in lines[:20])


@pytest.fixture
def capture(caplog: pytest.LogCaptureFixture) -> Iterator[Capture]:
    with caplog.at_level(logging.DEBUG, logger="shardstream"):
        yield Capture(caplog)


@pytest.fixture
def planted(request: pytest.FixtureRequest) -> Planted:
    return Planted(request.node.name)


def _shard(n: int = 3) -> bytes:
    """A small valid shard."""
    buffer = io.BytesIO()
    with ss.TarWriter(buffer) as sink:
        for i in range(n):
            sink.write({"__key__": f"k{i:03d}", "txt": f"sample {i}"})
    return buffer.getvalue()


def _take(dataset: Any, n: int = 100) -> list[Any]:
    return list(itertools.islice(dataset, n))


@contextlib.contextmanager
def _answering(handler: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Iterator[str]:
    """A loopback HTTP server answering every request with ``handler``; yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_any(self) -> None:
            handler(self)

        do_GET = do_POST = do_PUT = do_HEAD = do_any

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _echo_forbidden(h: http.server.BaseHTTPRequestHandler) -> None:
    """A 403 whose body quotes the request target, query string included (as many servers do)."""
    answer = f"<Error><Code>AccessDenied</Code><Resource>{h.path}</Resource></Error>".encode()
    h.send_response(403)
    h.send_header("Content-Length", str(len(answer)))
    h.end_headers()
    h.wfile.write(answer)


def _echo_refusal(h: http.server.BaseHTTPRequestHandler) -> None:
    """A token endpoint that refuses, quoting the request (a hostile or careless server)."""
    body = h.rfile.read(int(h.headers.get("Content-Length") or 0)).decode("latin-1")
    answer = json.dumps({"error": "invalid_grant", "error_description": f"rejected {h.path} {body}"})
    h.send_response(400)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(answer)))
    h.end_headers()
    h.wfile.write(answer.encode())


@contextlib.contextmanager
def _silent() -> Iterator[int]:
    """A loopback port that accepts connections and never answers; yields the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- HTTP: 403, 404, log_shards, telemetry, the cache, reprs -----------------------------------------


def test_http_errors_log_lines_telemetry_and_reprs(
    http_server: Any,
    capture: Capture,
    planted: Planted,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHARDSTREAM_TELEMETRY_INTERVAL", "0.000001")  # a telemetry line per item
    n = next(_count)
    http_server.write(f"leak{n}/ok.tar", _shard())
    http_server.fail(f"leak{n}/forbidden.tar", 403, times=1000)
    ok = planted.url(http_server.url, f"leak{n}/ok.tar", "ok shard")
    forbidden = planted.url(http_server.url, f"leak{n}/forbidden.tar", "403 shard")
    missing = planted.url(http_server.url, f"leak{n}/missing.tar", "404 shard")
    options = {"headers": {"Authorization": f"Bearer {planted.make('header')}"}, "retries": 1}

    def every(**extra: Any) -> list[Any]:
        return _take(
            ss.ShardStream(
                [ok, forbidden, missing],
                shuffle_shards=False,
                handler=ss.warn_and_continue,
                storage_options=options,
                log_shards=True,
                telemetry=True,
                **extra,
            )
        )

    counts: list[int] = []  # (samples are not shown: their __url__ is the shard's URL as given, data)
    capture.run("dataset", lambda: counts.append(len(every(cache=None))))
    capture.run("cached", lambda: counts.append(len(every(cache=ss.CachePolicy(str(tmp_path / "c"))))))
    assert counts == [3, 3], capture.errors
    capture.run("403", lambda: _take(ss.ShardStream([forbidden], storage_options=options, cache=None)))
    capture.run("404", lambda: _take(ss.WebDataset(missing, storage_options=options)))
    capture.run("open", lambda: open_url(missing, storage_options=options))
    capture.run("stat", lambda: stat_url(forbidden, storage_options=options))
    with _answering(_echo_forbidden) as echoing:
        quoted = planted.url(echoing, "quoted/shard.tar", "echoed URL")
        capture.run("echoed", lambda: open_url(quoted, storage_options=options))
        capture.run("echoed stat", lambda: stat_url(quoted, storage_options=options))

    dataset = ss.ShardStream(
        [ok, forbidden], shuffle_shards=False, handler=ss.warn_and_continue, telemetry=True, cache=None
    )
    loader = ss.WebLoader(dataset, batch_size=None, num_workers=0, telemetry=True)
    capture.run("loader", lambda: _take(loader))
    capture.show(dataset.stats(), loader.stats(), ss.telemetry.format_table(dataset.stats()))
    engine = ss.Loader(dataset, batch_size=None)
    capture.run("engine", lambda: _take(engine))
    capture.show(
        dataset,
        loader,
        engine,
        ss.WebDataset([ok, missing], storage_options=options),
        ss.SimpleShardList([ok, missing]),
        ss.FunctionStage(_take, ok, storage_options=options),
        ss.ReadShards(source=get_source(ok, options)),
        get_source(ok, options),
        ss.SchemeRouter(storage_options=options),
        *dataset.pipeline,
    )
    text = capture.check(planted, errors=6)
    assert "opening shard" in text and "telemetry (" in text  # the log lines were written


def test_a_timeout_and_proxies(capture: Capture, planted: Planted, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = {"connect_timeout": 0.5, "response_timeout": 0.2, "first_byte_deadline": 0.5, "retries": 2}
    with _silent() as port:
        url = planted.url(f"http://127.0.0.1:{port}", "never/answers.tar", "timeout")
        capture.run("timeout", lambda: open_url(url, storage_options=fast).read())
        capture.run("timeout dataset", lambda: _take(ss.ShardStream([url], storage_options=fast, cache=None)))
    for variable, scheme in (("HTTP_PROXY", "http"), ("HTTPS_PROXY", "https")):
        user, password = planted.make("proxy user"), planted.make("proxy password")
        proxy = f"http://{user}:{password}@127.0.0.1:{_closed_port()}"
        monkeypatch.setenv(variable, proxy)
        url = planted.url(f"{scheme}://shards.example", "via/proxy.tar", f"{scheme} via proxy")
        capture.run(f"{scheme} proxy", lambda: open_url(url, storage_options=fast).read())  # noqa: B023
        capture.show(get_source(url, fast))
        monkeypatch.delenv(variable)
    capture.check(planted, errors=4)


# -- state errors ------------------------------------------------------------------------------------


def test_state_errors(http_server: Any, capture: Capture, planted: Planted) -> None:
    n = next(_count)
    for i in range(3):
        http_server.write(f"state{n}/s{i}.tar", _shard())
    urls = [planted.url(http_server.url, f"state{n}/s{i}.tar", f"shard {i}") for i in range(3)]
    saved = ss.WebDataset(urls, shardshuffle=False)
    items = iter(saved)
    next(items)
    state = saved.state_dict()
    node = {"shard": 0, "url": urls[1], "offset": 17}
    other = ss.WebDataset(urls[1:], shardshuffle=False)
    capture.run("other shards", lambda: other.load_state_dict(state))
    capture.run("no fingerprint", lambda: other.load_state_dict({"epoch": 0, "nodes": [node]}))
    capture.run("bad epoch", lambda: other.load_state_dict({**state, "epoch": urls[0]}))
    capture.run("bad nodes", lambda: other.load_state_dict({**state, "nodes": urls[0]}))
    loader = ss.WebLoader(other, batch_size=None, num_workers=0)
    capture.run("loader", lambda: loader.load_state_dict({"workers": [node], "url": urls[0]}))
    capture.run("loader workers", lambda: loader.load_state_dict({"version": 1, "workers": urls[0]}))
    capture.run("run", lambda: Run.from_json([urls[0], "not a number"]))
    capture.run("run split", lambda: Run(urls[0], 0, 3).split(5))
    capture.run("run length", lambda: Run(urls[0], 0).size)
    capture.show(Run(urls[0], 0, 3), state)
    capture.check(planted, errors=8)


# -- the stores ----------------------------------------------------------------------------------------


def test_s3_wrong_keys(s3_server: Any, s3_bucket: str, capture: Capture, planted: Planted) -> None:
    url = s3_server.put_object(s3_bucket, "train/shard-000.tar", _shard())
    wrong_secret = s3_server.options_for(secret_access_key=planted.make("s3 secret key", 40), retries=1)
    wrong_key = s3_server.options_for(
        access_key_id=planted.make("s3 access key id", 20),
        secret_access_key=planted.make("s3 secret key 2", 40),
        session_token=planted.make("s3 session token"),
        retries=1,
    )
    for name, options in (("wrong secret", wrong_secret), ("unknown key", wrong_key)):
        capture.run(f"{name} open", lambda: open_url(url, storage_options=options).read())  # noqa: B023
        capture.run(f"{name} stat", lambda: stat_url(url, storage_options=options))  # noqa: B023
        capture.run(
            f"{name} dataset",
            lambda: _take(ss.ShardStream([url], storage_options=options, cache=None)),  # noqa: B023
        )
        capture.run(
            f"{name} listing",
            lambda: _take(ss.ObjectStream(f"s3://{s3_bucket}/train/", storage_options=options)),  # noqa: B023
        )
        capture.show(
            get_source(url, options),
            ss.ShardStream([url], storage_options=options, cache=None),
            ss.FunctionStage(_take, url, storage_options=options),  # (a stage's repr shows its arguments)
        )
    capture.check(planted, errors=8)


def _service_account(planted: Planted, token_uri: str) -> dict[str, str]:
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode()
    )
    for line in pem.splitlines()[1:-1]:
        planted.add(line, "GCS private key")
    return {
        "type": "service_account",
        "project_id": "leaks",
        "private_key_id": planted.make("GCS private key id"),
        "private_key": pem,
        "client_email": "reader@leaks.iam.gserviceaccount.com",
        "client_id": "1234",
        "token_uri": token_uri,
    }


def test_gcs_token_in_every_form(gcs_server: Any, capture: Capture, planted: Planted, tmp_path: Path) -> None:
    bucket = gcs_server.create_bucket(f"leaks-{next(_count)}")
    url = gcs_server.put_object(bucket, "train/shard-000.tar", _shard())
    missing = f"gs://{bucket}/train/missing.tar"
    with _answering(_echo_refusal) as refusing:
        account = _service_account(planted, f"{refusing}/token")
        # (an authorized user's token is refreshed at Google's endpoint only, whatever its
        # token_uri says: these two fail as they load, one field short)
        user = {
            "type": "authorized_user",
            "client_secret": planted.make("GCS client secret"),
            "refresh_token": planted.make("GCS refresh token"),
        }
        unreachable = {**account, "token_uri": f"http://127.0.0.1:{_closed_port()}/token"}
        key_file = tmp_path / "key.json"
        key_file.write_text(json.dumps(unreachable))
        credentials = pytest.importorskip("google.oauth2.credentials")
        tokens: dict[str, object] = {
            "JSON key text": json.dumps(account),
            "dict": account,
            "authorized user dict": user,
            "authorized user JSON": json.dumps({**user, "client_id": "c.apps.example", "type": 7}),
            "broken JSON": json.dumps(account)[:-40],
            "bad private key": {**account, "private_key": planted.make("GCS bad private key", 60)},
            "key file": str(key_file),
            "access token": planted.make("GCS access token"),
            "missing key file": f"/nonexistent/{planted.make('GCS path')}/key.json",
            "path-like token": f"~/{planted.make('GCS path 2')}",
            "Credentials object": credentials.Credentials(token=planted.make("GCS credentials token")),
        }
        for form, token in tokens.items():
            options = {"endpoint_url": gcs_server.endpoint_url, "token": token, "retries": 1}
            capture.run(f"{form} open", lambda: open_url(url, storage_options=options).read())  # noqa: B023
            capture.run(f"{form} 404", lambda: stat_url(missing, storage_options=options))  # noqa: B023
            capture.run(
                f"{form} dataset",
                lambda: _take(ss.ShardStream([url, missing], storage_options=options, cache=None)),  # noqa: B023
            )
            capture.run(f"{form} source", lambda: capture.show(get_source(url, options)))  # noqa: B023
    capture.check(planted, errors=2 * len(tokens))


def test_azure_wrong_key_and_sas(azurite_server: Any, capture: Capture, planted: Planted) -> None:
    container = azurite_server.create_container(f"leaks-{next(_count)}")
    url = azurite_server.put_blob(container, "train/shard-000.tar", _shard())
    sas = (
        f"sv=2022-11-02&sr=c&sp=rl&se=2030-01-01T00%3A00%3A00Z&skoid={planted.make('SAS skoid')}"
        f"&sktid={planted.make('SAS sktid')}&sig={quote(planted.key('SAS sig', 32), safe='')}"
    )
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={azurite_server.account_name};"
        f"AccountKey={planted.key('connection string key')};BlobEndpoint={azurite_server.endpoint_url};"
    )
    for name, options in (
        ("account key", azurite_server.options_for(account_key=planted.key("account key"), retries=1)),
        ("SAS", azurite_server.options_for(account_key=None, sas_token=sas, retries=1)),
        ("connection string", {"connection_string": connection, "retries": 1}),
    ):
        capture.run(f"{name} open", lambda: open_url(url, storage_options=options).read())  # noqa: B023
        capture.run(f"{name} stat", lambda: stat_url(url, storage_options=options))  # noqa: B023
        capture.run(
            f"{name} listing",
            lambda: _take(ss.ObjectStream(f"az://{container}/train/", storage_options=options)),  # noqa: B023
        )
        capture.show(get_source(url, options))
    capture.check(planted, errors=9)


def test_hub_bad_token(hub_server: Any, capture: Capture, planted: Planted) -> None:
    repo = f"org/leaks-{next(_count)}"
    hub_server.add_repo(repo, private=True)
    hub_server.add_file(repo, "train/shard-000.tar", _shard())
    url = f"hf://datasets/{repo}/train/shard-000.tar"
    options = {"endpoint": hub_server.endpoint, "token": f"hf_{planted.make('HF token')}", "retries": 1}
    capture.run("open", lambda: open_url(url, storage_options=options).read())
    capture.run("stat", lambda: stat_url(url, storage_options=options))
    capture.run("dataset", lambda: _take(ss.ShardStream([url], storage_options=options, cache=None)))
    capture.show(get_source(url, options))
    capture.check(planted, errors=3)


# -- the command line --------------------------------------------------------------------------------


def test_cli_outputs(http_server: Any, s3_server: Any, s3_bucket: str, planted: Planted) -> None:
    n = next(_count)
    http_server.write(f"cli{n}/ok.tar", _shard())
    ok = planted.url(http_server.url, f"cli{n}/ok.tar", "cli ok shard")
    missing = planted.url(http_server.url, f"cli{n}/missing.tar", "cli 404 shard")
    both = planted.url(http_server.url, f"cli{n}/{{ok,missing}}.tar", "cli brace spec")
    s3_url = s3_server.put_object(s3_bucket, "cli/shard.tar", _shard())
    s3_options = [
        f"endpoint_url={s3_server.endpoint_url}",
        f"access_key_id={s3_server.access_key}",
        f"secret_access_key={planted.make('cli s3 secret', 40)}",
        "retries=1",
    ]
    commands = [
        ["ls", both],
        ["ls", both, "--json"],
        ["ls", ok, "--members", "--json"],
        ["ls", ok, missing],  # argparse quotes the argument it does not take
        ["stat", ok, missing],
        ["stat", ok, missing, "--json"],
        ["verify", ok, missing],
        ["verify", ok, missing, "--json"],
        ["ls", s3_url, *(x for o in s3_options for x in ("--storage-option", o))],
        ["ls", s3_url, "--storage-option", f"no-equals-sign-{planted.make('cli bad option')}"],
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSTREAM_", "WDS_"))}
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "shardstream.cli", "-vv", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for command in commands
    ]
    outputs = []
    for proc in runs:
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        outputs.append((proc.returncode, out + err))
    text = "\n".join(out for _, out in outputs)
    leaks = planted.leaks(text)
    assert not leaks, f"secrets leaked ({', '.join(leaks)}):\n{_around(text, planted)}"
    assert [code for code, _ in outputs] == [1, 1, 0, 2, 1, 1, 1, 1, 1, 1], outputs
    assert all(out.strip() for _, out in outputs)
