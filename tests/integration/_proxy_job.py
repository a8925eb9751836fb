"""Child process of test_proxies: read (and write) through whatever proxy and CA bundle its
environment names. ``python _proxy_job.py job.json out.json``.

Job keys (each optional): ``shards`` (URLs read with ss.ShardStream), ``each`` (URLs opened one by one
with ``open_url``, each with its own result: the sample keys of the shard, or the error; torch is
not imported for these), ``objects`` (an S3 prefix read with ObjectDataset: one
sample alone, then a batch), ``write`` (a URL written and read back), ``storage_options``,
``block`` (top-level module names that cannot be imported here, as if not installed). Writes
``{"keys": [...], "each": [{"keys": [...]} or {"error": str}, ...], "objects": [...],
"written": bool, "error": str}``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import tarfile
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _NotInstalled(importlib.abc.MetaPathFinder):
    """Makes the named packages fail to import, as when they are not installed."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = set(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def main() -> None:
    job = json.loads(open(sys.argv[1]).read())
    if job.get("block"):
        sys.meta_path.insert(0, _NotInstalled(job["block"]))
    import shardstream as ss
    from shardstream.sources import create_url, open_url

    opts = job.get("storage_options") or {}
    out: dict[str, Any] = {}
    each: list[dict[str, Any]] = []
    for url in job.get("each") or []:
        try:
            with open_url(url, storage_options=opts) as f, tarfile.open(fileobj=f, mode="r|") as tar:
                names = [member.name.split(".", 1)[0] for member in tar]
            each.append({"keys": list(dict.fromkeys(names))})
        except Exception as exc:
            each.append({"error": _error(exc)})
    out["each"] = each
    try:
        if job.get("shards"):
            ds = ss.ShardStream(job["shards"], shuffle_shards=False, storage_options=opts, cache=None)
            out["keys"] = [s["__key__"] for s in ds]
        if job.get("objects"):
            objects = ss.ObjectDataset(job["objects"], storage_options=opts)
            first = objects[0]["__key__"]  # one object: the blocking path
            batch = [s["__key__"] for s in objects.__getitems__(list(range(len(objects))))]  # the loop
            out["objects"] = [first, *batch]
        if job.get("write"):
            with create_url(job["write"], storage_options=opts) as f:
                f.write(b"written through the proxy")
            with open_url(job["write"], storage_options=opts) as f:
                out["written"] = f.read() == b"written through the proxy"
    except Exception as exc:
        out["error"] = _error(exc)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
