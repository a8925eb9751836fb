"""Child process of test_cache_full: read HTTP shards through a cache on a filesystem with no room.

``python _cache_full.py job.json out.json``; the job gives ``urls``, ``cache_dir``, ``cache_size``
(or null) and ``fsize`` (an RLIMIT_FSIZE in bytes, or null). With a file-size limit, writes past it
fail with ``EFBIG`` (SIGXFSZ is ignored, as a server process would). Writes the sample keys, the
warnings logged by shardstream and the cache's counters.
"""

from __future__ import annotations

import json
import logging
import resource
import signal
import sys

import shardstream as ss


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main() -> None:
    job = json.loads(open(sys.argv[1]).read())
    if job["fsize"] is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (job["fsize"], job["fsize"]))
    handler = Warnings()
    logging.getLogger("shardstream").addHandler(handler)
    policy = ss.CachePolicy(job["cache_dir"], job["cache_size"])
    keys = []
    for _ in range(2):  # a second epoch: hits for what was cached, direct reads for the rest
        ds = ss.ShardStream(job["urls"], shuffle_shards=False, cache=policy, read_ahead=False)
        keys.append([s["__key__"] + ":" + s["txt"].decode() for s in ds])
    with open(sys.argv[2], "w") as f:
        json.dump({"keys": keys, "warnings": handler.messages}, f)


if __name__ == "__main__":
    main()
