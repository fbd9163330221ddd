"""The normalized run and case model: plain frozen dataclasses and one long-form metric table.

Nothing in this package imports from the rest of tscope; readers produce it, analyzers consume it,
renderers print it.
"""

from tscope.model.case import (
    Alternative,
    Case,
    ChangePoint,
    CheckpointInfo,
    Finding,
    Spike,
    StoryEvent,
)
from tscope.model.metric_table import METRIC_COLUMNS, MetricTable, TextColumn
from tscope.model.run import (
    Caveat,
    LogRead,
    PartialInput,
    Run,
    RunEvent,
    Source,
    empty_metric_table,
)

__all__ = [
    "METRIC_COLUMNS",
    "Alternative",
    "Case",
    "Caveat",
    "ChangePoint",
    "CheckpointInfo",
    "Finding",
    "LogRead",
    "MetricTable",
    "PartialInput",
    "Run",
    "RunEvent",
    "Source",
    "Spike",
    "StoryEvent",
    "TextColumn",
    "empty_metric_table",
]
