"""MkDocs hook: the docstrings' Sphinx cross-reference roles, rendered as plain code.

The docstrings are written for Python readers and Sphinx habits (``:class:`Foo```,
``:meth:`~pkg.Cls.close```); mkdocstrings renders Google-style docstrings as Markdown, where such
a role shows as ``:class:`` followed by the code span. This hook drops the role and, as Sphinx
does for ``~``, keeps the last component of a ``~``-prefixed path. It runs on the HTML of every
page (after mkdocstrings), touches nothing inside ``<pre>`` blocks, and downloads nothing.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const):(<code>)(~?)([^<]*)(</code>)")
_PRE = re.compile(r"(<pre\b.*?</pre>)", re.S)


def _plain(match: re.Match[str]) -> str:
    opening, tilde, path, closing = match.groups()
    return f"{opening}{path.rpartition('.')[2] if tilde else path}{closing}"


def on_page_content(html: str, **kwargs: Any) -> str:
    parts = _PRE.split(html)
    return "".join(part if part.startswith("<pre") else _ROLE.sub(_plain, part) for part in parts)
