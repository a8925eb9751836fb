"""The one compiled part of shardstream; everything else is in pyproject.toml.

``shardstream.tar._cmembers``: the tar reader's fast path for plain members
(``src/shardstream/tar/_cmembers.c``). It is optional: where no C compiler is found, the build
goes on without it and the reader uses the Python parse it accelerates (``tar/reader.py``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("shardstream.tar._cmembers", ["src/shardstream/tar/_cmembers.c"], optional=True)]
)
