"""The base of the nodes that read samples through their stage's source (shards, planned runs)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..pipeline.base import Node
from ..sources import Source

__all__ = ["ReadingNode"]


class ReadingNode(Node):
    """A node whose ``stage`` reads through ``stage.source``: it provides
    :class:`~shardstream.pipeline.seams.ReadsSource`, so telemetry can time its I/O."""

    stage: Any

    def read_through(self, wrap: Callable[[Source], Source]) -> Source:
        stage = self.stage
        stage.stats  # noqa: B018 - create the skip counters now, so that the copy shares them
        timed = copy.copy(stage)
        timed.source = wrap(stage.source)
        self.stage = timed
        source: Source = stage.source
        return source
