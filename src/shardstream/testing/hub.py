"""A loopback stand-in for the part of the Hugging Face Hub's HTTP API that ``hf://`` and
``huggingface_hub`` read, with its CDN on a second port.

There is no Hub server to install, so tests of the ``hf://`` source (and of anything else that
reads the Hub) run against this: two ``ThreadingHTTPServer`` s in threads of this process, on
free ports of 127.0.0.1, stopped (listeners and open keep-alive connections) by :meth:`stop`.
It is proved faithful by running ``huggingface_hub``'s own client against it
(``tests/integration/test_sources_hf.py``).

The Hub (:attr:`HubStandIn.endpoint`, what ``HF_ENDPOINT`` is set to) answers:

- ``GET|HEAD /{datasets/|spaces/}{org}/{name}/resolve/{revision}/{path}``: an LFS file is a
  302 to the CDN with a signed, expiring URL (``Expires=``, ``Signature=``, ``Key-Pair-Id=``,
  as CloudFront's) and the headers ``huggingface_hub`` reads (``X-Repo-Commit``,
  ``X-Linked-Etag``, ``X-Linked-Size``, ``ETag``, ``Location``); a small (non-LFS) file is served
  directly, with ``Range`` support, ``X-Repo-Commit`` and ``ETag``.
- ``GET /api/{models|datasets|spaces}/{org}/{name}[/revision/{revision}]``: repo info (``sha``,
  ``siblings``, ``private``, ``gated``).
- ``GET /api/{type}s/{org}/{name}/tree/{revision}[/{path}]?recursive=&expand=``: the entries
  (``type``, ``path``, ``size``, ``oid``, ``lfs``), :attr:`HubStandIn.page_size` per page with a
  ``Link: <...>; rel="next"`` header, as the Hub paginates.
- ``POST /api/{type}s/{org}/{name}/paths-info/{revision}`` (``HfFileSystem.info``).

Errors are answered as the Hub answers them (``X-Error-Code`` and ``X-Error-Message``, which
``huggingface_hub.utils.hf_raise_for_status`` maps to its exceptions): without a token a missing
or private repo is ``401 RepoNotFound`` and a gated one ``401 GatedRepo``; with a valid token
without access, ``404 RepoNotFound`` and ``403 GatedRepo``; an unknown token ``401`` "Invalid
credentials in Authorization header"; a missing revision ``404 RevisionNotFound``; a missing file
``404 EntryNotFound`` (with ``X-Repo-Commit``).

The CDN (:attr:`HubStandIn.cdn_url`) serves ``/blobs/{sha256}`` with ``Range`` (206,
``Content-Range``, 416), refuses an expired or forged signature with 403, and logs whether an
``Authorization`` header arrived (it never should). Every request of both servers is logged
(:attr:`HubStandIn.hub_log`, :attr:`HubStandIn.cdn_log`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.server
import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["HubStandIn", "Logged"]

_PREFIXES = {"dataset": "datasets/", "space": "spaces/", "model": ""}
_API_TYPES = {"datasets": "dataset", "spaces": "space", "models": "model"}
_DATE = "2024-01-01T00:00:00.000Z"
_LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {size}\n"


@dataclass(frozen=True)
class Logged:
    """One request a server of the stand-in received.

    Attributes:
        method: ``GET``, ``HEAD`` or ``POST``.
        path: the request's path, percent-encoded as sent.
        query: the query string.
        headers: the request headers (names lower-cased; an ``authorization`` value is logged as
            ``"***"``).
        authorized: whether an ``Authorization`` header arrived.
    """

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    authorized: bool


@dataclass(frozen=True)
class _File:
    size: int
    oid: str  # the git blob id (of the LFS pointer for an LFS file)
    sha256: str
    lfs: bool

    def entry(self, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "file", "oid": self.oid, "size": self.size, "path": path}
        if self.lfs:
            pointer = _LFS_POINTER.format(sha=self.sha256, size=self.size)
            out["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": len(pointer)}
        return out


@dataclass
class _Repo:
    private: bool = False
    gated: bool = False
    cdn_origin: str | None = None
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit sha
    commits: dict[str, dict[str, _File]] = field(default_factory=dict)  # sha -> path -> file


def _folder(path: str) -> dict[str, Any]:
    """A tree entry of a directory (its oid: any stable 40 hex digits)."""
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}  # noqa: S324


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's own id


class HubStandIn:
    """The Hub's HTTP API and its CDN on loopback (see the module doc).

    Args:
        root_dir: where file contents are kept (``blobs/<sha256>``).
        page_size: entries per page of the tree API (the Hub: 1000); tests lower it.
        url_ttl: seconds a signed CDN URL stays valid (default 3600).
    """

    def __init__(
        self, root_dir: str | os.PathLike[str], *, page_size: int = 1000, url_ttl: float = 3600.0
    ) -> None:
        self.root = Path(root_dir)
        self.page_size = page_size
        self.url_ttl = url_ttl
        self.token = "hf_" + secrets.token_hex(16)
        self._tokens: dict[str, frozenset[tuple[str, str]] | None] = {self.token: None}  # None: every repo
        self._repos: dict[tuple[str, str], _Repo] = {}
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self.hub_log: list[Logged] = []
        self.cdn_log: list[Logged] = []
        self._failures: dict[str, list[int]] = {"hub": [], "cdn": []}
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> HubStandIn:
        """Bind both servers to free loopback ports and serve them on threads."""
        (self.root / "blobs").mkdir(parents=True, exist_ok=True)
        for role in ("hub", "cdn"):
            server = _Server(("127.0.0.1", 0), _HubHandler if role == "hub" else _CDNHandler, self)
            self._servers.append(server)
            thread = threading.Thread(target=server.serve_forever, name=f"hub-standin-{role}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop both servers and close every connection they hold."""
        for server in self._servers:
            server.shutdown()
            server.close_connections()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> HubStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` of the Hub (what ``HF_ENDPOINT`` is set to)."""
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the CDN."""
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    # -- content ----------------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        *,
        repo_type: str = "dataset",
        private: bool = False,
        gated: bool = False,
        cdn_origin: str | None = None,
    ) -> None:
        """Create a repo with an empty ``main`` branch (or change the flags of an existing one).

        ``cdn_origin`` is the origin put in this repo's CDN redirects instead of :attr:`cdn_url`
        (a fault proxy in front of the CDN)."""
        self._check_type(repo_type)
        with self._lock:
            repo = self._repos.get((repo_type, repo_id))
            if repo is None:
                repo = self._repos[(repo_type, repo_id)] = _Repo()
                sha = self._new_commit_sha(repo_id, "init")
                repo.commits[sha] = {}
                repo.refs["main"] = sha
            repo.private, repo.gated, repo.cdn_origin = private, gated, cdn_origin

    def add_file(
        self,
        repo_id: str,
        path: str,
        data: bytes,
        *,
        repo_type: str = "dataset",
        revision: str = "main",
        lfs: bool = True,
    ) -> str:
        """Commit ``data`` as ``path`` on branch ``revision`` (created from ``main`` when new; the
        repo is created public when new). Returns the new commit's sha."""
        self._check_type(repo_type)
        if (repo_type, repo_id) not in self._repos:
            self.add_repo(repo_id, repo_type=repo_type)
        sha256 = hashlib.sha256(data).hexdigest()
        blob = self.root / "blobs" / sha256
        if not blob.exists():
            tmp = blob.with_name(f".{sha256}.{secrets.token_hex(4)}")
            tmp.write_bytes(data)
            os.replace(tmp, blob)
        oid = _git_oid(_LFS_POINTER.format(sha=sha256, size=len(data)).encode() if lfs else data)
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            parent = repo.refs.get(revision) or repo.refs["main"]
            tree = dict(repo.commits[parent])
            tree[path.strip("/")] = _File(len(data), oid, sha256, lfs)
            sha = self._new_commit_sha(repo_id, path)
            repo.commits[sha] = tree
            repo.refs[revision] = sha
        return sha

    def add_branch(
        self, repo_id: str, name: str, *, repo_type: str = "dataset", from_revision: str = "main"
    ) -> str:
        """Create (or move) branch ``name`` (any name, ``refs/pr/1`` included) at
        ``from_revision``; returns its commit sha."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            sha = self._commit_of(repo, from_revision)
            if sha is None:
                raise KeyError(f"no revision {from_revision!r} in {repo_id}")
            repo.refs[name] = sha
            return sha

    def commit_of(self, repo_id: str, revision: str = "main", *, repo_type: str = "dataset") -> str:
        """The commit sha ``revision`` points at."""
        with self._lock:
            sha = self._commit_of(self._repos[(repo_type, repo_id)], revision)
        if sha is None:
            raise KeyError(f"no revision {revision!r} in {repo_id}")
        return sha

    def add_token(self, token: str, repos: Iterable[str | tuple[str, str]] | None = None) -> None:
        """Accept ``token``: for every repo (``repos=None``), else for the repos named
        (``"org/name"`` meaning a dataset, or ``(repo_type, repo_id)``); for a gated repo, having
        access means its conditions were accepted."""
        allowed = None
        if repos is not None:
            allowed = frozenset(("dataset", r) if isinstance(r, str) else (r[0], r[1]) for r in repos)
        with self._lock:
            self._tokens[token] = allowed

    def rotate_signing_key(self) -> None:
        """Invalidate every CDN URL signed so far (the CDN answers them 403, as an expired one)."""
        with self._lock:
            self._key = secrets.token_bytes(32)

    def fail_next(self, server: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests to ``server`` (``"hub"`` or ``"cdn"``) with ``status``."""
        with self._lock:
            self._failures[server].extend([status] * times)

    def clear_logs(self) -> None:
        """Forget the requests logged so far."""
        with self._lock:
            self.hub_log.clear()
            self.cdn_log.clear()

    def resolve_url(
        self, repo_id: str, path: str, *, repo_type: str = "dataset", revision: str = "main"
    ) -> str:
        """The Hub's ``resolve`` URL of a file, as ``huggingface_hub.hf_hub_url`` builds it."""
        rev = quote(revision, safe="")
        return f"{self.endpoint}/{_PREFIXES[repo_type]}{repo_id}/resolve/{rev}/{quote(path)}"

    # -- internals shared by the handlers ---------------------------------------------------------

    @staticmethod
    def _check_type(repo_type: str) -> None:
        if repo_type not in _PREFIXES:
            raise ValueError(f"repo_type={repo_type!r}; use 'dataset', 'model' or 'space'")

    def _new_commit_sha(self, repo_id: str, what: str) -> str:
        return hashlib.sha1(f"{repo_id}:{what}:{secrets.token_hex(8)}".encode()).hexdigest()  # noqa: S324

    @staticmethod
    def _commit_of(repo: _Repo, revision: str) -> str | None:
        if revision in repo.refs:
            return repo.refs[revision]
        if re.fullmatch(r"[0-9a-f]{40}", revision) and revision in repo.commits:
            return revision
        return None

    def _log(self, role: str, entry: Logged) -> int | None:
        """Log a request; returns a status to fail it with (see :meth:`fail_next`)."""
        with self._lock:
            (self.hub_log if role == "hub" else self.cdn_log).append(entry)
            queue = self._failures[role]
            return queue.pop(0) if queue else None

    def _sign(self, sha256: str, expires: int) -> str:
        with self._lock:
            key = self._key
        return hmac.new(key, f"{sha256}:{expires}".encode(), hashlib.sha256).hexdigest()

    def _signed_location(self, repo: _Repo, sha256: str) -> str:
        expires = int(time.time() + self.url_ttl)
        origin = repo.cdn_origin or self.cdn_url
        signature = self._sign(sha256, expires)
        return f"{origin}/blobs/{sha256}?Expires={expires}&Signature={signature}&Key-Pair-Id=K1STANDIN"

    def _blob(self, sha256: str) -> Path:
        return self.root / "blobs" / sha256


class _Server(http.server.ThreadingHTTPServer):
    """A threaded server that remembers its open connections, so that ``stop`` can close them."""

    daemon_threads = True
    # socketserver's default listen backlog is 5: 32 clients connecting at once would see
    # refused or reset connections and reconnect, which measures the stand-in, not the client.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[_Base], hub: HubStandIn) -> None:
        self.hub = hub
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:  # a client went away: fine
        pass


class _Answer(Exception):
    """An error answer: status, the Hub's ``X-Error-Code`` and message, extra headers."""

    def __init__(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


class _Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    role = ""
    timeout = 60

    def log_message(self, format: str, *args: Any) -> None:  # no per-request stderr lines
        pass

    @property
    def hub(self) -> HubStandIn:
        return self.server.hub

    def _logged(self) -> int | None:
        parts = urlsplit(self.path)
        headers = {k.lower(): ("***" if k.lower() == "authorization" else v) for k, v in self.headers.items()}
        entry = Logged(self.command, parts.path, parts.query, headers, "authorization" in headers)
        return self.hub._log(self.role, entry)

    def _send(self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _send_error(self, answer: _Answer) -> None:
        headers = {"Content-Type": "application/json", **answer.headers}
        if answer.code:
            headers["X-Error-Code"] = answer.code
        headers["X-Error-Message"] = answer.message
        self._send(answer.status, json.dumps({"error": answer.message}).encode(), headers)

    def _send_file(self, path: Path, size: int, headers: dict[str, str], *, status_ok: int = 200) -> None:
        """Serve a file with ``Range`` support (one range: 206, or 416 past the end)."""
        headers = {**headers, "Accept-Ranges": "bytes"}
        start, end = 0, size
        spec = self.headers.get("Range")
        if spec:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", spec.strip())
            if m and (m.group(1) or m.group(2)):
                if m.group(1):
                    start = int(m.group(1))
                    end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                else:  # a suffix: the last N bytes
                    start = max(0, size - int(m.group(2)))
                if start >= size:
                    self._send(416, b"", {**headers, "Content-Range": f"bytes */{size}"})
                    return
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
                status_ok = 206
        self.send_response(status_ok)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start
            while left:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def _drain(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        body = self._drain() if self.command == "POST" else b""
        fail = self._logged()
        try:
            if fail is not None:
                raise _Answer(fail, None, f"injected failure {fail}")
            self.route(body)
        except _Answer as answer:
            self._send_error(answer)

    def route(self, body: bytes) -> None:
        raise NotImplementedError


class _CDNHandler(_Base):
    role = "cdn"

    def route(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        m = re.fullmatch(r"/blobs/([0-9a-f]{64})", parts.path)
        if self.command not in ("GET", "HEAD") or m is None:
            raise _Answer(404, None, "Not Found")
        sha256 = m.group(1)
        query = parse_qs(parts.query)
        expires = (query.get("Expires") or ["0"])[0]
        signature = (query.get("Signature") or [""])[0]
        if not expires.isdigit() or not hmac.compare_digest(signature, self.hub._sign(sha256, int(expires))):
            raise _Answer(403, None, "AccessDenied: the signature does not match")
        if int(expires) < time.time():
            raise _Answer(403, None, "AccessDenied: Request has expired")
        blob = self.hub._blob(sha256)
        if not blob.exists():
            raise _Answer(404, None, "NoSuchKey")
        headers = {"ETag": f'"{sha256}"', "Content-Type": "application/octet-stream"}
        self._send_file(blob, blob.stat().st_size, headers)


class _HubHandler(_Base):
    role = "hub"

    # -- access -----------------------------------------------------------------------------------

    def _repo(self, repo_type: str, repo_id: str) -> _Repo:
        """The repo, if this request may read it; else the Hub's error answer."""
        auth = self.headers.get("Authorization") or ""
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        hub = self.hub
        with hub._lock:
            repo = hub._repos.get((repo_type, repo_id))
            known = token in hub._tokens if token else False
            allowed = hub._tokens.get(token) if known and token else None
        if token and not known:
            raise _Answer(401, None, "Invalid credentials in Authorization header")
        access = bool(token) and (allowed is None or (repo_type, repo_id) in allowed)
        if repo is None or (repo.private and not access):
            if token:
                raise _Answer(404, "RepoNotFound", "Repository not found")
            raise _Answer(401, "RepoNotFound", "Invalid username or password.")
        if repo.gated and not access:
            kind = {"dataset": "Dataset", "model": "Model", "space": "Space"}[repo_type]
            if token:
                raise _Answer(
                    403,
                    "GatedRepo",
                    f"Access to {kind.lower()} {repo_id} is restricted and you are not in the authorized "
                    "list. "
                    f"Visit {hub.endpoint}/{_PREFIXES[repo_type]}{repo_id} to ask for access.",
                )
            raise _Answer(
                401,
                "GatedRepo",
                f"Access to {kind.lower()} {repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
            )
        return repo

    def _tree_at(self, repo: _Repo, revision: str) -> tuple[str, dict[str, _File]]:
        with self.hub._lock:
            sha = self.hub._commit_of(repo, revision)
            if sha is None:
                raise _Answer(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return sha, repo.commits[sha]

    @staticmethod
    def _split_revision(repo: _Repo, segments: list[str]) -> tuple[str, list[str]]:
        """The revision at the start of ``segments`` (percent-decoded; a revision with ``/`` sent
        unencoded is found by trying longer prefixes) and the segments after it."""
        for n in range(len(segments), 0, -1):
            candidate = unquote("/".join(segments[:n]))
            if candidate in repo.refs and n > 1:
                return candidate, segments[n:]
        return unquote(segments[0]), segments[1:]

    # -- routes -----------------------------------------------------------------------------------

    def route(self, body: bytes) -> None:
        path = urlsplit(self.path).path
        if path.startswith("/api/"):
            self._api(path[len("/api/") :], body)
        elif self.command in ("GET", "HEAD"):
            self._resolve(path)
        else:
            raise _Answer(404, None, "Not Found")

    def _resolve(self, path: str) -> None:
        segments = path.lstrip("/").split("/")
        repo_type = "model"
        if segments and segments[0] in ("datasets", "spaces"):
            repo_type = _API_TYPES[segments.pop(0)]
        if len(segments) < 5 or segments[2] != "resolve":
            raise _Answer(404, None, "Not Found")
        repo_id = f"{unquote(segments[0])}/{unquote(segments[1])}"
        repo = self._repo(repo_type, repo_id)
        revision, rest = self._split_revision(repo, segments[3:])
        sha, tree = self._tree_at(repo, revision)
        filename = unquote("/".join(rest))
        found = tree.get(filename)
        if found is None:
            raise _Answer(404, "EntryNotFound", f"Entry not found: {filename}", {"X-Repo-Commit": sha})
        headers = {"X-Repo-Commit": sha, "ETag": f'"{found.oid}"', "Vary": "Origin, Accept-Encoding"}
        if found.lfs:
            location = self.hub._signed_location(repo, found.sha256)
            text = f"Found. Redirecting to {location}".encode()
            headers.update(
                {
                    "Location": location,
                    "X-Linked-Etag": f'"{found.sha256}"',
                    "X-Linked-Size": str(found.size),
                    "Content-Type": "text/plain; charset=utf-8",
                }
            )
            self._send(302, text, headers)
            return
        headers["Content-Type"] = "application/octet-stream"
        self._send_file(self.hub._blob(found.sha256), found.size, headers)

    def _api(self, path: str, body: bytes) -> None:
        segments = path.split("/")
        if len(segments) < 3 or segments[0] not in _API_TYPES:
            raise _Answer(404, None, "Not Found")
        repo_type = _API_TYPES[segments[0]]
        repo_id = f"{unquote(segments[1])}/{unquote(segments[2])}"
        repo = self._repo(repo_type, repo_id)
        rest = segments[3:]
        if not rest or (rest[0] == "revision" and len(rest) >= 2):
            revision = self._split_revision(repo, rest[1:])[0] if rest else "main"
            self._json(self._info(repo_type, repo_id, repo, revision))
        elif rest[0] == "tree" and len(rest) >= 2 and self.command == "GET":
            revision, sub = self._split_revision(repo, rest[1:])
            self._tree(repo, revision, unquote("/".join(sub)).strip("/"))
        elif rest[0] == "paths-info" and len(rest) >= 2 and self.command == "POST":
            revision, _ = self._split_revision(repo, rest[1:])
            self._paths_info(repo, revision, body)
        else:
            raise _Answer(404, None, "Not Found")

    def _json(self, data: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _info(self, repo_type: str, repo_id: str, repo: _Repo, revision: str) -> dict[str, Any]:
        sha, tree = self._tree_at(repo, revision)
        return {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],  # noqa: S324 - an id, not a secret
            "id": repo_id,
            "author": repo_id.split("/")[0],
            "sha": sha,
            "private": repo.private,
            "gated": "auto" if repo.gated else False,
            "disabled": False,
            "lastModified": _DATE,
            "createdAt": _DATE,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "siblings": [{"rfilename": p} for p in sorted(tree)],
        }

    @staticmethod
    def _entries(tree: Mapping[str, _File], folder: str, recursive: bool) -> list[dict[str, Any]]:
        """Tree entries under ``folder``: directories (as the Hub, before files) then files."""
        base = folder + "/" if folder else ""
        dirs: set[str] = set()
        files: list[dict[str, Any]] = []
        for path in sorted(tree):
            if not path.startswith(base):
                continue
            rel = path[len(base) :]
            parts = rel.split("/")
            for depth in range(1, len(parts) if recursive else min(2, len(parts))):
                dirs.add(base + "/".join(parts[:depth]))
            if recursive or len(parts) == 1:
                files.append(tree[path].entry(path))
        return [_folder(d) for d in sorted(dirs)] + files

    def _tree(self, repo: _Repo, revision: str, folder: str) -> None:
        _, tree = self._tree_at(repo, revision)
        if folder and folder in tree:
            raise _Answer(404, "EntryNotFound", f"{folder} is a file, not a directory")
        if folder and not any(p.startswith(folder + "/") for p in tree):
            raise _Answer(404, "EntryNotFound", f"Entry not found: {folder}")
        query = parse_qs(urlsplit(self.path).query)
        recursive = (query.get("recursive") or ["false"])[0].lower() in ("true", "1")
        expand = (query.get("expand") or ["false"])[0].lower() in ("true", "1")
        entries = self._entries(tree, folder, recursive)
        if expand:
            for entry in entries:
                entry["lastCommit"] = {
                    "id": "0" * 40,
                    "title": "stand-in",
                    "date": "2024-01-01T00:00:00.000Z",
                }
        cursor = (query.get("cursor") or [""])[0]
        start = int(base64.urlsafe_b64decode(cursor.encode()).decode()) if cursor else 0
        page = entries[start : start + self.hub.page_size]
        headers = {}
        if start + self.hub.page_size < len(entries):
            token = base64.urlsafe_b64encode(str(start + self.hub.page_size).encode()).decode()
            parts = urlsplit(self.path)
            keep = "&".join(p for p in parts.query.split("&") if p and not p.startswith("cursor="))
            nxt = f"{self.hub.endpoint}{parts.path}?{keep + '&' if keep else ''}cursor={token}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._json(page, headers)

    def _paths_info(self, repo: _Repo, revision: str, body: bytes) -> None:
        _, tree = self._tree_at(repo, revision)
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if kind == "application/json":
            data = json.loads(body or b"{}")
            paths = data.get("paths") or []
        else:
            paths = parse_qs(body.decode()).get("paths", [])
        out = []
        for raw in [paths] if isinstance(paths, str) else paths:
            path = str(raw).strip("/")
            if path in tree:
                out.append(tree[path].entry(path))
            elif any(p.startswith(path + "/") for p in tree):
                out.append(_folder(path))
        self._json(out)
