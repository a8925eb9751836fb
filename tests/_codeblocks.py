"""The Python code blocks of a Markdown document, and how the docs tests run them.

**Which blocks run.** Every block fenced with exactly ```` ```python ```` runs, in a fresh
namespace, in a temporary directory (the current directory while it runs), in this process.
Blocks fenced with anything else (```` ```text ````, ```` ```bash ````, ```` ```python title ````
is still ``python``) are not Python to run. A ```` ```python ```` block that cannot run here (it
needs a cluster, credentials or a GPU) is skipped by rule when the line right before its fence is
the marker ``<!-- not run: REASON -->`` with a reason; the reason is shown in the test's skip
message. Indented blocks (inside a list item or an admonition) run as well, dedented.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

#: The marker that keeps the next ```python block from running, with its reason.
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a document."""

    path: Path
    line: int  # the line of its opening fence (1-based)
    language: str  # the first word of the fence's info string ("" when none)
    code: str
    not_run: str | None  # the reason of a <!-- not run: ... --> marker right before it

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced code block of the Markdown file ``path``, in order."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        fence = opening.group("fence")
        info = opening.group("info").strip()
        body: list[str] = []
        end = number + 1
        while end < len(lines) and not re.match(rf"^\s*{re.escape(fence)}\s*$", lines[end]):
            body.append(lines[end])
            end += 1
        previous = lines[number - 1] if number > 0 else ""
        marker = NOT_RUN.match(previous)
        found.append(
            Block(
                path=path,
                line=number + 1,
                language=info.split()[0] if info else "",
                code=textwrap.dedent("\n".join(body)) + "\n",
                not_run=marker.group("reason") if marker else None,
            )
        )
        number = end + 1
    return found


def python_blocks(path: Path) -> list[Block]:
    """The blocks of ``path`` that are Python to run (``python`` fences), marked ones included."""
    return [block for block in blocks(path) if block.language == "python"]


def run(block: Block) -> dict[str, object]:
    """Run ``block`` in a fresh namespace (the caller sets the directory) and return it."""
    namespace: dict[str, object] = {}
    exec(compile(block.code, f"{block.path.name} block at line {block.line}", "exec"), namespace)  # noqa: S102
    return namespace
