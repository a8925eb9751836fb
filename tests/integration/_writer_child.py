"""Child process of test_writer_faults: writes shards slowly until it is killed (or raises).

``python _writer_child.py PATTERN STORAGE_OPTIONS_JSON MODE``: writes 1,000 samples with
``ShardWriter(PATTERN, maxcount=50)``; MODE ``slow`` sleeps 5 ms per sample (the test kills it
mid-shard), MODE ``raise`` raises inside the ``with`` block in the middle of the fourth shard.
"""

from __future__ import annotations

import json
import sys
import time

from shardstream.tar import ShardWriter


def main() -> None:
    pattern, options, mode = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    with ShardWriter(pattern, maxcount=50, storage_options=options or None) as sink:
        for i in range(1000):
            if mode == "raise" and i == 175:
                raise RuntimeError("the writer's own code failed")
            sink.write({"__key__": f"{i:05d}", "txt": "x" * 200})
            if mode == "slow":
                time.sleep(0.005)


if __name__ == "__main__":
    main()
