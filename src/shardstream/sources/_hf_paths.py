"""``hf://`` URLs (:class:`HFPath`, :func:`parse_hf_url`), the token's lookup, and how long a
signed CDN URL may be reused (:func:`expiry`)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from ..config import StoreEnv
from ..errors import ConfigurationError, redact_url

__all__ = ["HFPath", "expiry", "find_token", "parse_hf_url"]

_TYPES = {"datasets": "dataset", "spaces": "space", "models": "model"}
_URL_PREFIX = {"dataset": "datasets/", "space": "spaces/", "model": ""}
_SPECIAL_REF = re.compile(r"(pr/\d+|convert/[\w.-]+)(?:/|$)")


@dataclass(frozen=True)
class HFPath:
    """An ``hf://`` URL taken apart.

    Attributes:
        repo_type: ``"dataset"``, ``"model"`` or ``"space"``.
        repo_id: ``"org/name"``.
        revision: branch, tag or commit (``"main"`` when the URL names none).
        path: the file's (or folder's) path in the repo, ``""`` for its root.
    """

    repo_type: str
    repo_id: str
    revision: str
    path: str

    @property
    def repo_page(self) -> str:
        """The repo's path on the Hub's site (``datasets/org/name``)."""
        return f"{_URL_PREFIX[self.repo_type]}{self.repo_id}"

    def describe(self) -> str:
        return f"{self.repo_type} repo {self.repo_id!r}"


def parse_hf_url(url: str) -> HFPath:
    """Split ``hf://[datasets/|spaces/|models/]org/name[@revision][/path]`` (see the module doc)."""
    if not url.startswith("hf://"):
        raise ConfigurationError(f"{redact_url(url)} is not an hf:// URL")
    rest = url[len("hf://") :]
    repo_type = "model"
    head, sep, tail = rest.partition("/")
    if head in _TYPES and sep:
        repo_type, rest = _TYPES[head], tail
    parts = rest.split("/", 2)
    if len(parts) < 2 or not parts[0] or not parts[1] or "@" in parts[0]:
        raise ConfigurationError(
            f"cannot read {redact_url(url)}: an hf:// URL names a repo as org/name, e.g. "
            "hf://datasets/org/name/train-000000.tar (a model repo: hf://org/name/file; a revision: "
            "hf://datasets/org/name@v1.0/file)"
        )
    org, name_rev = parts[0], parts[1]
    path = parts[2] if len(parts) == 3 else ""
    name, at, revision = name_rev.partition("@")
    if at:
        if revision == "refs" and (m := _SPECIAL_REF.match(path)):
            revision, path = f"refs/{m.group(1)}", path[m.end() :]
        revision = unquote(revision)
        if not revision:
            raise ConfigurationError(f"cannot read {redact_url(url)}: the revision after '@' is empty")
    else:
        revision = "main"
    return HFPath(repo_type, f"{org}/{name}", revision, path)


def find_token(token: str | bool | None, env: StoreEnv) -> str | None:
    """The token to send: ``token=`` (a string), else ``HF_TOKEN``, else the token file; none
    for ``token=False``, or when ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set and ``token`` is not
    ``True`` (as ``huggingface_hub`` does)."""
    if token is False:
        return None
    if isinstance(token, str):
        if not token.strip():
            raise ConfigurationError(
                "token='' is empty: pass a Hugging Face token, or token=False to send none"
            )
        return token.strip()
    if token is None and env.hf_hub_disable_implicit_token:
        return None
    if env.hf_token:
        return env.hf_token.strip()
    try:
        with open(env.hf_token_path, encoding="utf-8") as f:
            found = f.read().strip()
    except OSError:
        return None
    return found or None


def expiry(url: str, default_ttl: float) -> float:
    """``time.monotonic()`` after which a signed URL should not be used: 30 s (or a tenth of its
    life, if shorter) before its ``Expires`` / ``X-Amz-Date + X-Amz-Expires``, else ``default_ttl``."""
    query = {k.lower(): v[0] for k, v in parse_qs(urlsplit(url).query).items() if v}
    now_wall, now = time.time(), time.monotonic()
    left: float | None = None
    if query.get("expires", "").isdigit():
        left = int(query["expires"]) - now_wall
    elif query.get("x-amz-expires", "").isdigit() and query.get("x-amz-date"):
        try:
            signed = time.mktime(time.strptime(query["x-amz-date"], "%Y%m%dT%H%M%SZ")) - time.timezone
            left = signed + int(query["x-amz-expires"]) - now_wall
        except ValueError:
            left = None
    if left is None:
        return now + default_ttl
    return now + min(default_ttl, left - min(30.0, max(left, 0.0) / 10))
