"""The docs site (``docs/``, ``mkdocs.yml``) stays true to the code.

- **Code runs.** Every Python block of every page runs, by the rule of :mod:`_codeblocks`: a
  block fenced ```` ```python ```` runs in a fresh namespace in a temporary directory, unless the
  line before its fence is ``<!-- not run: REASON -->`` (for examples that need a cluster,
  credentials or a GPU); blocks fenced otherwise (``text``, ``bash``) are not run.
  ``tests/test_readme.py`` does the same for README.md.
- **The site builds** with ``mkdocs build --strict``: a broken link, anchor or API reference, a
  page missing from the nav, or a docstring griffe cannot read fails the test (and so CI).
- **Pages that list what the code has** list exactly that: the errors page against the classes of
  :mod:`shardstream.errors` and their base classes, the command-line page against the CLI's
  subcommands, the API reference against ``shardstream.__all__``.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from _codeblocks import Block, blocks, python_blocks, run

import shardstream
import shardstream.errors

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = [block for page in PAGES for block in python_blocks(page)]


# ------------------------------------------------------------------ code blocks
@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: f"{block.path.relative_to(DOCS)}:{block.line}")
def test_docs_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.not_run is not None:
        pytest.skip(f"marked not run: {block.not_run}")
    monkeypatch.chdir(tmp_path)
    run(block)


def test_the_docs_have_code_that_runs() -> None:
    assert sum(block.not_run is None for block in BLOCKS) >= 8, "the docs lost their runnable examples"


def test_the_block_rule(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\n```\n\n"
        "<!-- not run: needs a cluster -->\n```python\nimport nothing\n```\n\n"
        "```text\nnot python\n```\n\n!!! note\n    ```python\n    y = 2\n    ```\n"
    )
    found = blocks(page)
    assert [(b.language, b.not_run) for b in found] == [
        ("python", None),
        ("python", "needs a cluster"),
        ("text", None),
        ("python", None),
    ]
    assert [b.code for b in python_blocks(page)] == ["x = 1\n", "import nothing\n", "y = 2\n"]
    assert run(python_blocks(page)[2])["y"] == 2


def test_a_marker_needs_a_reason(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- not run: -->\n```python\nx = 1\n```\n")
    assert python_blocks(page)[0].not_run is None  # an empty reason is no marker: the block runs


# ------------------------------------------------------------------ the site builds
def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert result.returncode == 0 and not warnings, output
    assert (tmp_path / "site" / "reference" / "datasets" / "index.html").exists()
    assert "Unreleased" in (tmp_path / "site" / "changelog" / "index.html").read_text()  # the snippet


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [str(page.relative_to(DOCS)) for page in PAGES if f" {page.relative_to(DOCS)}" not in nav]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


# ------------------------------------------------------------------ the errors page
ERRORS_PAGE = DOCS / "errors.md"


def _exception_classes() -> dict[str, type[BaseException]]:
    """The public exception classes of :mod:`shardstream.errors`."""
    return {
        name: value
        for name in shardstream.errors.__all__
        if isinstance(value := getattr(shardstream.errors, name), type) and issubclass(value, BaseException)
    }


def _section(page: str, heading: str) -> str:
    start = page.index(f"\n## {heading}\n")
    end = page.find("\n## ", start + 1)
    return page[start : end if end != -1 else len(page)]


def _tree(page: str) -> dict[str, tuple[str | None, list[str]]]:
    """The tree block of the errors page: name -> (parent in the tree, the bases in parentheses)."""
    (code,) = re.findall(r"^```text\n(ShardStreamError\n.*?)^```", page, flags=re.M | re.S)
    found: dict[str, tuple[str | None, list[str]]] = {}
    stack: list[str] = []
    for line in code.splitlines():
        match = re.match(
            r"^(?P<prefix>[│ ]*)(?P<branch>[├└]── )?(?P<name>\w+)(?: \((?P<bases>[\w, ]+)\))?\s*$", line
        )
        assert match, f"errors.md: a tree line that is not 'Name (Bases)': {line!r}"
        depth = len(match.group("prefix")) // 4 + (1 if match.group("branch") else 0)
        del stack[depth:]
        parent = stack[-1] if stack else None
        bases = [b.strip() for b in match.group("bases").split(",")] if match.group("bases") else []
        found[match.group("name")] = (parent, bases)
        stack.append(match.group("name"))
    return found


def _table(page: str) -> dict[str, tuple[list[str], str]]:
    """The table of "The exceptions": name -> (bases, when it is raised)."""
    rows: dict[str, tuple[list[str], str]] = {}
    for line in _section(page, "The exceptions").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or not cells[0].startswith("`"):
            continue
        rows[cells[0].strip("`")] = (re.findall(r"`(\w+)`", cells[1]), cells[2])
    return rows


def test_the_errors_tree_is_the_class_tree() -> None:
    classes = _exception_classes()
    tree = _tree(ERRORS_PAGE.read_text())
    missing, extra = sorted(set(classes) - set(tree)), sorted(set(tree) - set(classes))
    assert not missing and not extra, f"errors.md's tree: missing {missing}, extra {extra}"
    for name, (parent, standard) in tree.items():
        cls = classes[name]
        ours = [b.__name__ for b in cls.__bases__ if issubclass(b, shardstream.errors.ShardStreamError)]
        others = [b.__name__ for b in cls.__bases__ if not issubclass(b, shardstream.errors.ShardStreamError)]
        if name == "ShardStreamError":
            assert parent is None
            continue
        assert [parent] == ours, f"errors.md's tree puts {name} under {parent}; its bases are {ours}"
        assert standard == others, (
            f"errors.md's tree gives {name} the bases {standard}; the class has {others}"
        )


def test_the_errors_table_names_every_class_with_its_bases() -> None:
    classes = _exception_classes()
    table = _table(ERRORS_PAGE.read_text())
    missing, extra = sorted(set(classes) - set(table)), sorted(set(table) - set(classes))
    assert not missing and not extra, f"errors.md's table: missing {missing}, extra {extra}"
    for name, (bases, when) in table.items():
        assert bases == [b.__name__ for b in classes[name].__bases__], f"{name}: stale bases {bases}"
        assert len(when) > 20, f"{name}: say when it is raised"


def test_the_errors_page_names_only_real_exceptions() -> None:
    named = set(re.findall(r"`(\w+(?:Error|Timeout))`", ERRORS_PAGE.read_text()))
    standard = {name for name in named if isinstance(getattr(builtins, name, None), type)}
    unknown = sorted(named - set(_exception_classes()) - standard - {"DecompressionBombError"})
    assert not unknown, f"errors.md names exceptions that do not exist: {unknown}"


def test_the_errors_check_finds_a_stale_page() -> None:
    page = ERRORS_PAGE.read_text()
    stale = page.replace("│   ├── ObjectChangedError\n", "").replace("ObjectChangedError", "X")
    with pytest.raises(AssertionError):
        assert set(_tree(stale)) == set(_exception_classes())
    wrong = page.replace("| `SplitError` | `ConfigurationError` |", "| `SplitError` | `ValueError` |")
    assert _table(wrong)["SplitError"][0] != [b.__name__ for b in shardstream.errors.SplitError.__bases__]


# ------------------------------------------------------------------ the command line page
def test_the_cli_page_documents_every_command() -> None:
    from shardstream.cli.__main__ import build_parser

    parser = build_parser(commands=())
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    commands = set(sub.choices)  # type: ignore[union-attr]
    page = (DOCS / "cli.md").read_text()
    headings = set(re.findall(r"^### `shardstream (\w+)", page, flags=re.M))
    missing, extra = sorted(commands - headings), sorted(headings - commands)
    assert not missing and not extra, f"cli.md: missing {missing}, extra {extra}"


# ------------------------------------------------------------------ the API reference
def _directives() -> dict[str, object]:
    """``::: dotted.path`` of every reference page -> the object it names; a module rendered with
    its members (no ``members: false`` option) documents the names of its ``__all__`` as well."""
    found: dict[str, object] = {}
    for page in sorted((DOCS / "reference").glob("*.md")):
        for path, options in re.findall(r"^::: ([\w.]+)\n((?:[ ]{4}.*\n)*)", page.read_text(), flags=re.M):
            module, _, name = path.rpartition(".")
            value = getattr(importlib.import_module(module), name, None) if module else None
            if value is not None and not isinstance(value, types.ModuleType):
                found[path] = value
                continue
            found[path] = value = importlib.import_module(path)  # a module
            if "members: false" not in options:
                for member in getattr(value, "__all__", []):
                    found[f"{path}.{member}"] = getattr(value, member)
    return found


def test_the_reference_documents_every_public_name() -> None:
    documented = _directives()
    objects = {id(value) for value in documented.values()}
    names = {path.rpartition(".")[2] for path in documented}
    text = "".join(page.read_text() for page in (DOCS / "reference").glob("*.md"))
    missing = []
    for name in shardstream.__all__:
        value = getattr(shardstream, name)
        if isinstance(value, types.ModuleType):
            if f"`{name}`" not in text:
                missing.append(name)
        elif id(value) not in objects and name not in names:
            missing.append(name)
    assert not missing, f"names of shardstream.__all__ that no reference page documents: {missing}"


def test_the_hook_renders_sphinx_roles_as_code() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    html = (
        "<p>a :class:<code>SplitPolicy</code>, :meth:<code>~shardstream.cache.ShardCache.close</code></p>"
        "<pre><code>:class:<code>kept</code></code></pre>"
    )
    assert hooks.on_page_content(html) == (
        "<p>a <code>SplitPolicy</code>, <code>close</code></p>"
        "<pre><code>:class:<code>kept</code></code></pre>"
    )
