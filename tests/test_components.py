"""A test whose installed component is missing skips here and fails under ``CI=true``
(``tests/_components.py``); the CUDA tests skip in both, saying there is no device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = """
import pytest
from _components import require_component, require_cuda, require_module

def test_module():
    require_module("shardstream_no_such_module", "a feature that needs it")

def test_component():
    require_component("Widget 2.0", "the widget store", present=False)

def test_present():
    require_component("Widget 2.0", "the widget store", present=True)

def test_cuda():
    require_cuda("the GPU path")
"""


def _run(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_cases.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout


def test_missing_components_skip_with_what_is_not_tested(tmp_path: Path) -> None:
    out = _run(tmp_path, None)
    wanted = "not tested here: a feature that needs it (shardstream_no_such_module is not installed; "
    assert wanted + "`bash run.sh setup` installs it)" in out, out
    assert "not tested here: the widget store (Widget 2.0 is not installed; " in out
    assert "PASSED test_cases.py::test_present" in out
    if "no CUDA device" in out:
        assert "not tested here: no CUDA device (the GPU path)" in out and "1 passed, 3 skipped" in out
    else:  # a machine with a GPU runs the CUDA paths
        assert "2 passed, 2 skipped" in out


def test_under_ci_they_fail_with_the_same_message(tmp_path: Path) -> None:
    out = _run(tmp_path, "TRUE")
    assert "FAILED test_cases.py::test_module - Failed: not tested here: a feature that needs it" in out, out
    assert "FAILED test_cases.py::test_component - Failed: not tested here: the widget store" in out
    assert "CI=true runs every test: a missing component fails it" in out
    assert "PASSED test_cases.py::test_present" in out
    # CI machines have no GPU: the CUDA paths skip there too (the one exception)
    assert "2 failed, 1 passed, 1 skipped" in out or "2 failed, 2 passed" in out
