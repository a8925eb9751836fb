"""The worker start rule (loader/_start.py) as a function of the Python version and the threads:
shardstream's forkserver is never chosen by itself on CPython 3.10.0-3.10.8, whose forkserver
socket any local user could reach (CVE-2022-42919); spawn is, with one log line saying why."""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Iterator

import pytest

from shardstream.loader import _start


@pytest.mark.parametrize(
    ("version", "other_threads", "method"),
    [
        ((3, 10, 0), True, "spawn"),
        ((3, 10, 8), True, "spawn"),
        ((3, 10, 8), False, "fork"),  # no thread to inherit a held lock from: fork, as before
        ((3, 10, 9), True, "forkserver"),
        ((3, 10, 14), True, "forkserver"),
        ((3, 11, 0), True, "forkserver"),
        ((3, 11, 9), False, "fork"),
        ((3, 12, 0), True, "forkserver"),
        ((3, 12, 7), False, "fork"),
        ((3, 13, 1, "final", 0), True, "forkserver"),  # (a whole sys.version_info works too)
    ],
)
def test_the_auto_rule_by_version_and_threads(
    version: tuple[int, ...], other_threads: bool, method: str
) -> None:
    assert _start.auto_method(version, other_threads) == method


@pytest.fixture
def other_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The auto rule (not the suite's pinned fork), with a user's thread running."""
    monkeypatch.delenv("SHARDSTREAM_WORKER_START", raising=False)
    monkeypatch.setattr(_start, "_explained", set())
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="user-metrics", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(5)


@pytest.mark.skipif(
    multiprocessing.get_all_start_methods()[0] != "fork",
    reason="the rule applies where fork is the default",
)
def test_on_an_unsafe_python_workers_are_spawned_and_the_log_says_why_once(
    other_thread: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_start, "_PYTHON", (3, 10, 8))
    with caplog.at_level(logging.WARNING, logger="shardstream.loader._start"):
        first, second = _start.choose(), _start.choose()
    assert first.method == second.method == "spawn"
    assert first.context.get_start_method() == "spawn"
    assert "user-metrics" in first.reason and "CVE-2022-42919" in first.reason
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "Python 3.10.8" in lines[0] and "3.10.9" in lines[0], lines
    monkeypatch.setattr(_start, "_PYTHON", (3, 10, 9))
    assert _start.choose().method == "forkserver"  # (the server is started only when used)


def test_an_explicit_forkserver_on_an_unsafe_python_is_kept_and_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SHARDSTREAM_WORKER_START", "forkserver")
    monkeypatch.setattr(_start, "_explained", set())
    monkeypatch.setattr(_start, "_PYTHON", (3, 10, 3))
    with caplog.at_level(logging.WARNING, logger="shardstream.loader._start"):
        assert _start.choose().method == "forkserver"
    assert any("CVE-2022-42919" in r.getMessage() for r in caplog.records)
