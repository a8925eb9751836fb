"""Names from data (sample keys, tar members, index entries, URL paths) checked before they
become file paths.

``unpack`` writes ``DST/{key}.{ext}``, the cache keeps ``root/{name}``, an index keeps each
shard's offsets in ``_offsets/{shard}.bin``: a name that came from a shard, an index or a URL is
joined under a directory. Joined as it is, ``../../x`` lands outside that directory and ``/etc/x``
replaces it (the path traversal of ``tarfile.extractall``, CVE-2007-4559). Every such place calls
:func:`check_relative_path`, which refuses the name rather than rewriting it: a rewritten name
would no longer be the key the data uses, and two names could become one.

Refused: an empty name, an absolute path (a leading ``/``, or a drive on Windows), a ``..``
component, an empty component (``a//b`` names the file ``a/b``; a trailing ``/`` names a
directory), and NUL (no file name can hold it). A ``.`` component is accepted: it cannot leave
the directory, and shards made with ``tar -cf shard.tar .`` name every member ``./...``.
"""

from __future__ import annotations

import os

from .errors import UnsafePathError

__all__ = ["check_relative_path"]

#: The separators a name is split on: "/" everywhere, and the platform's own where it differs
#: ("\\" on Windows), so a name cannot climb out through either.
_SEPARATORS = tuple(dict.fromkeys(s for s in ("/", os.sep, os.altsep) if s))


def _components(name: str) -> list[str]:
    parts = [name]
    for sep in _SEPARATORS:
        parts = [p for part in parts for p in part.split(sep)]
    return parts


def _reason(name: str) -> str | None:
    """Why ``name`` cannot be joined under a directory safely, or ``None`` when it can."""
    if not name:
        return "is empty: it names the destination directory itself"
    if "\0" in name:
        return "holds a NUL byte: no file name can (the system ends names at NUL)"
    if name.startswith(_SEPARATORS) or os.path.isabs(name) or os.path.splitdrive(name)[0]:
        return "is an absolute path: joined under a directory it would replace that directory"
    parts = _components(name)
    if ".." in parts:
        return "has a '..' component: joined under a directory it would reach outside that directory"
    if "" in parts:
        return "has an empty component (a doubled or trailing '/'): it names another path than it says"
    return None


def check_relative_path(name: str, *, what: str, url: object = None, fix: str) -> str:
    """Return ``name`` when it is a safe relative path, else raise :class:`UnsafePathError`.

    Args:
        name: the name taken from data: a sample key, a member name, an index entry, a name made
            from a URL.
        what: what the name is, the start of the message (``"member"``, ``"sample __key__"``).
        url: the shard, index or URL the name came from; credentials are removed before it is
            named in the message. ``None`` when there is none.
        fix: the message's last sentence: how to repair the data (rename the sample, re-pack
            the shard, rewrite the index).

    Raises:
        UnsafePathError: ``name`` is empty or absolute, has a ``..`` or empty component, or holds
            NUL; the message names the value, where it came from, why it is refused and ``fix``.
    """
    reason = _reason(name)
    if reason is None:
        return name
    raise UnsafePathError(what, name=name, reason=reason, url=url, fix=fix)
