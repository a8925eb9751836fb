"""The environment reader: aliases, explicit precedence, and the unknown-name warning."""

from __future__ import annotations

import logging

import pytest

from shardstream.config import parse_size, read_settings


def test_aliases_and_precedence() -> None:
    assert read_settings({"WDS_CACHE": "/a"}).cache_dir == "/a"
    assert read_settings({"WDS_CACHE": "/a", "SHARDSTREAM_CACHE_DIR": "/b"}).cache_dir == "/b"
    assert read_settings({"WDS_CACHE_SIZE": "-1"}).cache_size is None
    assert read_settings({"SHARDSTREAM_CACHE_SIZE": "2G"}).cache_size == 2 << 30
    assert parse_size("512M") == 512 << 20
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_unknown_variable_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    env = {"SHARDSTREAM_CACHE_DRI": "/typo"}
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        for _ in range(3):
            read_settings(env)
    warnings = [r for r in caplog.records if "SHARDSTREAM_CACHE_DRI" in r.getMessage()]
    assert len(warnings) == 1
