"""Child process of test_proxies: read (and write) through whatever proxy and CA bundle its
environment names. ``python _proxy_job.py job.json out.json``.

Job keys (each optional): ``shards`` (URLs read with ss.Dataset), ``objects`` (an S3 prefix read
with ObjectDataset: one sample alone, then a batch), ``write`` (a URL written and read back),
``storage_options``. Writes ``{"keys": [...], "objects": [...], "written": bool, "error": str}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import shardstream as ss
from shardstream.sources import create_url, open_url


def main() -> None:
    job = json.loads(open(sys.argv[1]).read())
    opts = job.get("storage_options") or {}
    out: dict[str, Any] = {}
    try:
        if job.get("shards"):
            ds = ss.Dataset(job["shards"], shuffle_shards=False, storage_options=opts, cache=None)
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
        out["error"] = f"{type(exc).__name__}: {exc}"
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
