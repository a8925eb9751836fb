"""RetryPolicy and ResumableReader against an in-memory opener that injects faults (no network)."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

import pytest

from shardstream.errors import (
    ConfigurationError,
    ShardNotFoundError,
    SourceError,
    TransientSourceError,
)
from shardstream.sources._resume import ObjectChangedError, Opened, ResumableReader
from shardstream.sources._retry import RetryPolicy


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def policy(attempts: int = 8, deadline: float = 300.0) -> tuple[RetryPolicy, Sleeps]:
    sleeps = Sleeps()
    return RetryPolicy(attempts=attempts, deadline=deadline, sleep=sleeps, rng=random.Random(0)), sleeps


class _Body:
    def __init__(self, data: bytes, fail_at: int | None, exc: BaseException, server: FakeServer) -> None:
        self.data, self.pos, self.fail_at, self.exc, self.server = data, 0, fail_at, exc, server
        self.closed = False

    def readinto(self, buffer: memoryview) -> int:
        if self.fail_at is not None and self.pos >= self.fail_at:
            raise self.exc
        end = len(self.data) if self.fail_at is None else min(self.fail_at, len(self.data))
        n = min(len(buffer), end - self.pos)
        buffer[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n

    def close(self) -> None:
        self.closed = True
        self.server.open_bodies -= 1


@dataclass
class FakeServer:
    """Serves ``data``; the i-th request's body breaks after ``faults[i]`` bytes (None = no fault)."""

    data: bytes
    faults: list[int | None] = field(default_factory=list)
    open_errors: list[BaseException] = field(default_factory=list)
    exc: BaseException = field(default_factory=lambda: ConnectionResetError(104, "reset by peer"))
    etag: str = '"v1"'
    calls: list[tuple[int, str | None]] = field(default_factory=list)
    open_bodies: int = 0

    def __call__(self, offset: int, etag: str | None) -> Opened:
        self.calls.append((offset, etag))
        if self.open_errors:
            raise self.open_errors.pop(0)
        fault = self.faults.pop(0) if self.faults else None
        self.open_bodies += 1
        return Opened(_Body(self.data[offset:], fault, self.exc, self), len(self.data), self.etag)


def translate(exc: BaseException) -> SourceError:
    if isinstance(exc, ConnectionError | TimeoutError):
        return TransientSourceError(f"transient: {exc}")
    return SourceError(f"permanent: {exc}")


def read_all(reader: ResumableReader, chunk: int) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := reader.readinto(buf):
        out += buf[:n]
    return bytes(out)


DATA = bytes(range(256)) * 400  # 102400 bytes


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_resumes_exactly_after_faults_at_many_offsets(chunk: int) -> None:
    faults: list[int | None] = [0, 1, 999, 4096, 0, 30_000, 5]
    server = FakeServer(DATA, faults=list(faults))
    pol, sleeps = policy()
    reader = ResumableReader("http://h/x.tar", server, translate=translate, policy=pol)
    assert read_all(reader, chunk) == DATA
    offsets = [c[0] for c in server.calls]
    assert offsets == [0, 0, 1, 1000, 5096, 5096, 35096, 35101]  # each resume starts where delivery stopped
    assert all(etag == '"v1"' for _, etag in server.calls[1:])  # If-Match on every resume
    assert reader.retries == len(faults) and len(sleeps) == len(faults)
    reader.close()
    assert server.open_bodies == 0


def test_starts_at_offset() -> None:
    reader = ResumableReader("u", FakeServer(DATA), translate=translate, offset=100_000, policy=policy()[0])
    assert reader.read() == DATA[100_000:]
    assert reader.tell() == len(DATA)


def test_permanent_error_fails_fast_with_cause() -> None:
    cause = ShardNotFoundError("cannot open u: HTTP 404", status=404)
    server = FakeServer(DATA, open_errors=[cause])
    with pytest.raises(ShardNotFoundError) as info:
        ResumableReader("u", server, translate=translate, policy=policy()[0])
    assert info.value is cause and len(server.calls) == 1


def test_untranslated_exception_is_translated_with_cause() -> None:
    server = FakeServer(DATA, faults=[10], exc=ValueError("bad chunk"))
    reader = ResumableReader("u", server, translate=translate, policy=policy()[0])
    with pytest.raises(SourceError, match="permanent: bad chunk") as info:
        reader.read()
    assert isinstance(info.value.__cause__, ValueError)


def test_gives_up_after_attempts(caplog: pytest.LogCaptureFixture) -> None:
    server = FakeServer(DATA, faults=[100] + [0] * 10)
    pol, sleeps = policy(attempts=3)
    reader = ResumableReader("http://user:pw@h/x.tar", server, translate=translate, policy=pol)
    with caplog.at_level(logging.WARNING, logger="shardstream"), pytest.raises(TransientSourceError) as info:
        read_all(reader, 1000)
    msg = str(info.value)
    assert "giving up on http://***@h/x.tar at byte 100 after 3 failed attempts" in msg
    assert "pw" not in msg and "retries=" in msg
    assert len(sleeps) == 2 and len(caplog.records) == 2
    assert caplog.records[0].getMessage().startswith("retry 1/2 for http://***@h/x.tar at offset 100")


def test_attempts_reset_once_bytes_flow() -> None:
    server = FakeServer(DATA, faults=[1000 * i for i in range(1, 30)])
    reader = ResumableReader("u", server, translate=translate, policy=policy(attempts=2)[0])
    assert read_all(reader, 4096) == DATA  # 29 separate faults, each recovered on the first retry


def test_deadline_bounds_total_retry_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("shardstream.sources._resume.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("shardstream.sources._retry.time.monotonic", lambda: clock[0])

    def slow_sleep(seconds: float) -> None:
        clock[0] += 10.0

    pol = RetryPolicy(attempts=100, deadline=25.0, sleep=slow_sleep)
    server = FakeServer(DATA, open_errors=[ConnectionRefusedError()] * 50)
    with pytest.raises(TransientSourceError, match="giving up"):
        ResumableReader("u", server, translate=translate, policy=pol)
    assert len(server.calls) == 4  # failures at t=0, 10, 20, 30 -> 30 > 25 s deadline


def test_changed_object_is_detected() -> None:
    server = FakeServer(DATA, faults=[5000])
    reader = ResumableReader("u", server, translate=translate, policy=policy()[0])
    reader.read(100)
    server.etag = '"v2"'
    with pytest.raises(ObjectChangedError, match="changed while it was being read"):
        reader.read()
    assert server.open_bodies == 0


def test_truncated_body_is_transient_and_resumed() -> None:
    class Truncating(FakeServer):
        def __call__(self, offset: int, etag: str | None) -> Opened:
            opened = super().__call__(offset, etag)
            if len(self.calls) == 1:  # first response ends early without an error
                opened.body = _Body(self.data[:500], None, self.exc, self)
            return opened

    server = Truncating(DATA)
    reader = ResumableReader("u", server, translate=translate, policy=policy()[0])
    assert reader.read() == DATA and reader.retries == 1


def test_close_releases_body_and_rejects_reads() -> None:
    server = FakeServer(DATA)
    reader = ResumableReader("u", server, translate=translate, policy=policy()[0])
    reader.read(10)
    reader.close()
    assert server.open_bodies == 0
    with pytest.raises(ValueError, match="closed"):
        reader.readinto(bytearray(10))


def test_backoff_is_bounded_and_jittered() -> None:
    pol = RetryPolicy(base_delay=0.5, max_delay=4.0, rng=random.Random(1))
    for retry in range(1, 12):
        cap = min(4.0, 0.5 * 2 ** (retry - 1))
        samples = [pol.backoff(retry) for _ in range(50)]
        assert all(0 <= s <= cap for s in samples) and len(set(samples)) > 1


def test_policy_defaults_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTREAM_RETRIES", "3")
    monkeypatch.setenv("SHARDSTREAM_RETRY_DEADLINE", "12.5")
    pol = RetryPolicy.from_options()
    assert (pol.attempts, pol.deadline) == (3, 12.5)
    assert RetryPolicy.from_options(retries=5).attempts == 5  # explicit wins
    with pytest.raises(ConfigurationError, match="at least 1 attempt"):
        RetryPolicy(attempts=0)


# -- dead server budget (first_byte_deadline) ------------------------------------------------------


def test_default_budget_fails_a_silent_server_within_about_60s() -> None:
    from shardstream.sources._retry import silent_server_give_up
    from shardstream.sources.http import HTTPSource

    source = HTTPSource()  # the defaults a user gets (S3Source uses the same numbers)
    pol, pool = source.policy, source.pool
    assert (pol.attempts, pol.deadline, pol.first_byte_deadline) == (8, 300.0, 60.0)
    assert (pool.response_timeout, pool.read_timeout) == (20.0, 60.0)
    # Every attempt connects and then waits response_timeout for headers that never come.
    worst = silent_server_give_up(pol, pool.response_timeout)
    assert 60.0 <= worst <= 61.0  # was 365 s: 60 s read timeout per attempt under a 300 s deadline
    # A connect timeout on every attempt (host down) stays inside the budget too.
    assert silent_server_give_up(pol, pool.connect_timeout + pool.response_timeout) <= 61.0
    assert silent_server_give_up(RetryPolicy(attempts=2), 20.0) == 40.25  # attempts bound it first


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr("shardstream.sources._resume.time.monotonic", fake.monotonic)
    monkeypatch.setattr("shardstream.sources._retry.time.monotonic", fake.monotonic)
    return fake


def test_silent_server_gives_up_at_first_byte_deadline(clock: _Clock) -> None:
    def silent(offset: int, etag: str | None) -> Opened:
        clock.now += 20.0  # response_timeout spent waiting for headers
        raise TimeoutError("timed out")

    pol = RetryPolicy(sleep=clock.sleep, rng=random.Random(0))  # defaults: 8 attempts, 300 s, 60 s
    with pytest.raises(TransientSourceError) as info:
        ResumableReader("http://h/x.tar", silent, translate=translate, policy=pol)
    assert 60.0 <= clock.now <= 61.0
    assert "first_byte_deadline=60s" in str(info.value) and "does not answer" in str(info.value)


def test_stream_with_progress_keeps_the_long_budget(clock: _Clock) -> None:
    server = FakeServer(DATA, faults=[10_000])
    outage = [6]  # after the first bytes, six attempts of 20 s each time out: 120 s > 60 s

    def flaky(offset: int, etag: str | None) -> Opened:
        if offset and outage[0]:
            outage[0] -= 1
            clock.now += 20.0
            raise TimeoutError("timed out")
        return server(offset, etag)

    pol = RetryPolicy(sleep=clock.sleep, rng=random.Random(0))
    reader = ResumableReader("u", flaky, translate=translate, policy=pol)
    assert read_all(reader, 4096) == DATA
    assert clock.now > 120.0 and reader.retries == 7


def test_first_byte_deadline_option(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RetryPolicy.from_options(first_byte_deadline=5).first_byte_deadline == 5.0
    assert RetryPolicy.from_options().first_byte_deadline == 60.0
    with pytest.raises(ConfigurationError, match="first_byte_deadline"):
        RetryPolicy(first_byte_deadline=-1)
