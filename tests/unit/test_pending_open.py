"""PendingOpen (sources/_ahead.py): an open run in a thread, its stream or error handed over later,
and a cancel that leaves no stream open, also for an open that ends after the cancel."""

from __future__ import annotations

import io
import threading
import time

import pytest

from shardstream.errors import ShardNotFoundError
from shardstream.sources._ahead import PendingOpen


class Stream(io.BytesIO):
    pass


def test_result_is_the_stream_opened_in_another_thread() -> None:
    opened_in: list[str] = []

    def open_() -> Stream:
        opened_in.append(threading.current_thread().name)
        return Stream(b"abc")

    pending = PendingOpen(open_)
    stream = pending.result()
    assert stream.read() == b"abc"
    assert opened_in == ["shardstream-open-ahead"]
    assert pending.done
    with pytest.raises(RuntimeError, match="twice"):
        pending.result()


def test_the_open_error_is_raised_by_result_in_the_callers_thread() -> None:
    def open_() -> Stream:
        raise ShardNotFoundError("s3://b/missing.tar: no such object", url="s3://b/missing.tar")

    pending = PendingOpen(open_)
    time.sleep(0.05)  # the error waits for result(); nothing is raised before
    with pytest.raises(ShardNotFoundError, match="missing.tar") as info:
        pending.result()
    assert info.value.url == "s3://b/missing.tar"


def test_cancel_closes_a_stream_nobody_took() -> None:
    stream = Stream(b"abc")
    pending = PendingOpen(lambda: stream)
    while not pending.done:
        time.sleep(0.001)
    pending.cancel()
    assert stream.closed


def test_cancel_does_not_wait_for_a_slow_open_which_then_closes_its_own_stream() -> None:
    release = threading.Event()
    stream = Stream(b"abc")

    def slow_open() -> Stream:
        release.wait(10)
        return stream

    pending = PendingOpen(slow_open)
    started = time.monotonic()
    pending.cancel(wait=0.1)
    assert time.monotonic() - started < 5.0  # not the open's 10 s (generous: a loaded machine)
    assert not stream.closed and not pending.done
    release.set()
    deadline = time.monotonic() + 5
    while not pending.done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pending.done and stream.closed
