"""README.md is a landing page whose code runs and whose links lead somewhere.

Its ```` ```python ```` blocks run as written, each in a fresh namespace in a temporary directory,
by the rule of :mod:`_codeblocks` (the docs pages' blocks run the same way in
``tests/test_docs.py``). It stays under :data:`LIMIT` characters: the guide lives in ``docs/``,
and the README links to every guide page. CI runs the README's test command.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _codeblocks import Block, python_blocks, run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCKS = python_blocks(README)
#: The most characters the landing page may have (issue 44: the guide moved to docs/).
LIMIT = 15_000


def test_readme_has_code() -> None:
    assert BLOCKS, "the README lost its Python quick start"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_readme_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.not_run is not None:
        pytest.skip(f"marked not run: {block.not_run}")
    monkeypatch.chdir(tmp_path)
    namespace = run(block)
    if "loader" in namespace:
        # The quick start's loader really produced batches of (captions, labels).
        batches = list(namespace["loader"])  # type: ignore[call-overload]
        assert sum(len(labels) for _, labels in batches) == 1000


def test_readme_is_a_landing_page() -> None:
    size = len(README.read_text())
    assert size <= LIMIT, f"README.md has {size} characters, more than {LIMIT}: move the detail to docs/"


def test_readme_keeps_the_quick_start_commands() -> None:
    text = README.read_text()
    assert "bash run.sh demo" in text and "bash run.sh test" in text  # CI (.ci/run) runs the second
    assert "bash run.sh test" in (ROOT / ".ci" / "run").read_text()


def test_readme_links_every_guide_page_and_every_link_resolves() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    broken = [link for link in local if not (ROOT / link).exists()]
    assert not broken, f"README.md links to files that do not exist: {broken}"
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    pages -= {"docs/index.md", "docs/changelog.md"}  # the site's home, and CHANGELOG.md included
    unlinked = sorted(pages - set(local))
    assert not unlinked, f"README.md does not link these docs pages: {unlinked}"
