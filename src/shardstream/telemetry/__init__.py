"""Telemetry: counters and clocks a pipeline's stages call, and the reports made from them.

A leaf that imports nothing of the stages (stages call it, as in Grain's ``stats.py``):

* :mod:`.stats`: ``StageStats``, the skip counters every stage keeps;
* :mod:`.recorder`: ``Recorder``, the opt-in telemetry of one pipeline in one process;
* :mod:`.clock`: the timed generators the recorder puts in place of a node's own;
* :mod:`.io`: a timed source for the reading stage, and the retry counter;
* :mod:`.report`: merging processes' counters into a report, a table and a verdict.

How a pass is instrumented (which node gets which clock) is the stages' side, in
:mod:`shardstream.pipeline.instrument`.
"""

from .recorder import Recorder, enable, fresh, resolve
from .report import add_views, format_table, one_line, process_view, summarize, verdict
from .stats import StageStats

__all__ = [
    "Recorder",
    "StageStats",
    "add_views",
    "enable",
    "format_table",
    "fresh",
    "one_line",
    "process_view",
    "resolve",
    "summarize",
    "verdict",
]
