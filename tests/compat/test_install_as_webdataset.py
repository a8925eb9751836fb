"""``shardstream.install_as_webdataset()``: ``import webdataset`` resolves to shardstream."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    """Run ``code`` in a fresh interpreter (the alias is process-wide) and return its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_imports_of_webdataset_resolve_to_shardstream() -> None:
    out = run(
        """
        import shardstream
        shardstream.install_as_webdataset()
        import webdataset as wds
        from webdataset.filters import _batched, shuffle
        from webdataset import shardlists, gopen
        import webdataset.cache
        import webdataset.pipeline
        assert wds.WebDataset is shardstream.WebDataset
        assert shuffle is shardstream.shuffle
        assert shardlists is shardstream.compat.shardlists
        assert gopen is shardstream.gopen and callable(gopen)  # the function, as in WebDataset
        assert webdataset.cache is shardstream.compat.cache
        assert shardstream.cache.__name__ == "shardstream.cache"  # the native package is untouched
        assert shardstream.compat.filters.__spec__.name == "shardstream.compat.filters"
        print(sorted(n for n in __import__("sys").modules if n.split(".")[0] == "webdataset"))
        """
    )
    assert "webdataset.filters" in out and "webdataset.cache" in out


def test_a_webdataset_imported_before_is_replaced_with_a_warning() -> None:
    out = run(
        """
        import logging
        logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=__import__("sys").stdout)
        import webdataset
        assert not webdataset.__name__.startswith("shardstream") and hasattr(webdataset, "__file__")
        import shardstream
        shardstream.install_as_webdataset()
        shardstream.install_as_webdataset()  # a second call does nothing more
        import webdataset as again
        assert again.WebDataset is shardstream.WebDataset
        """
    )
    assert out.count("imported before the call") == 1
