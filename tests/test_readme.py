"""The README's Python code blocks run as written (in a temporary directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_code() -> None:
    assert BLOCKS, "the README lost its Python quick start"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), namespace)  # noqa: S102
    if "loader" in namespace:
        # The quick start's loader really produced batches of (captions, labels).
        batches = list(namespace["loader"])  # type: ignore[call-overload]
        assert sum(len(labels) for _, labels in batches) == 1000
