"""Lint and strict typing are part of the suite, so CI enforces them on every change."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_lint_and_format() -> None:
    if shutil.which("ruff", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    lint = run_tool("ruff", "check", "src", "tests", "benchmarks", "examples")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run_tool("ruff", "format", "--check", "src", "tests", "benchmarks", "examples")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


@pytest.mark.slow
def test_mypy_strict() -> None:
    result = run_tool("mypy", "--no-incremental", "--cache-dir=/dev/null")
    assert result.returncode == 0, result.stdout + result.stderr
